"""Pytest entry points of the systolic array's cocotb testbench (:mod:`sim.tb.systolic`).

One multi-format array per simulator: every input format the RTL knows (int8, the fp8
family at double rate, bf16, fp16, tf32, fp32 at a quarter rate, the block-scaled mxfp8 and
mxfp4 at four products per PE per cycle) in one build, driven by mixed-format programs.
Icarus evaluates the floating-point PEs event by event, so it runs a tiny array (2 x 2, split
two ways: tile positions of one PE); Verilator runs the simulation scale of the bundled specs
(8 x 8, split 1, 2 or 4 ways as trn2's row tiling), its build kept short by the runner making
only the toplevel's signals public. A third build, on
Verilator, is an MX array deeper than the formats' 32-index scale block, so that its tiles'
contractions cross from one block's scales to the next's.
"""

import pytest

from hdl.tensor.params import SystolicParams
from sim.tb import runner
from sim.tb.systolic import simulate

FORMATS = ("int8", "fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2", "cfp8_e5m2_b12", "bf16", "fp16",
           "tf32", "fp32", "mxfp8", "mxfp4")
DOUBLE = ("fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2", "cfp8_e5m2_b12")
QUARTER = ("fp32",)

PARAMS = {
    "icarus": SystolicParams(rows=2, cols=2, formats=FORMATS, double_rate=DOUBLE,
                             quarter_rate=QUARTER, moving_max=6, tiles=(1, 2)),
    "verilator": SystolicParams(rows=8, cols=8, formats=FORMATS, double_rate=DOUBLE,
                                quarter_rate=QUARTER, moving_max=16, tiles=(1, 2, 4)),
}


@pytest.mark.cocotb
def test_systolic_mixed_formats(sim, seed):
    result = simulate(PARAMS[sim], sim, seed)
    assert result.ok, f"{result} (seed {seed})"


FLAT = SystolicParams(rows=4, cols=4, formats=("int8",), moving_max=16, tiles=(1, 2))


@pytest.mark.cocotb
def test_systolic_flat_emission(sim, seed):
    """The flat elaboration passes the same bench as the hierarchical emission (an array
    split two ways, so that its tiled programs run too)."""
    result = simulate(FLAT, sim, seed, hierarchical=False)
    assert result.ok, f"{result} (seed {seed})"


@pytest.mark.cocotb
@pytest.mark.parametrize("drawn", [1066713303, 1903653856])
def test_systolic_tiled_programs_fit_the_harness(drawn):
    """Seed 1066713303 drew a tiled program whose transposes' rows, uncounted, overran the
    harness's result memory (index 144 of 144), seed 1903653856 one of more commands than
    its program memory holds: every output beat and every command is now budgeted."""
    runner.skip_unless_available("verilator")
    result = simulate(FLAT, "verilator", drawn, hierarchical=False)
    assert result.ok, result


@pytest.mark.cocotb
def test_systolic_single_format(seed):
    """An array of one format (the narrowest words, no format logic) on Icarus."""
    runner.skip_unless_available("icarus")
    result = simulate(SystolicParams(rows=1, cols=1, formats=("bf16",), moving_max=4),
                      "icarus", seed)
    assert result.ok, f"{result} (seed {seed})"


#: Deeper than the MX scale block (32 contraction indices, eight rows of quads): a full
#: tile's rows 8 and 9 (indices 32-39) carry the second block's scales, stationary and moving.
MX_DEEP = SystolicParams(rows=10, cols=1, formats=("mxfp8", "mxfp8_e5m2", "mxfp4"), moving_max=4)


@pytest.mark.cocotb
def test_systolic_mx_across_a_scale_block(seed):
    runner.skip_unless_available("verilator")
    result = simulate(MX_DEEP, "verilator", seed)
    assert result.ok, f"{result} (seed {seed})"
