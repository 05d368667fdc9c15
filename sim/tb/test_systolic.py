"""Pytest entry points of the systolic array's cocotb testbench (:mod:`sim.tb.systolic`)."""

import pytest

from hdl.tensor.params import SystolicParams
from sim.tb import runner
from sim.tb.systolic import simulate

PARAMS = {
    "int8-1x1": SystolicParams(rows=1, cols=1, fmt="int8", moving_max=16),
    "int8-8x8": SystolicParams(rows=8, cols=8, fmt="int8", moving_max=32),
    "fp16-4x4": SystolicParams(rows=4, cols=4, fmt="fp16", moving_max=16),
    "bf16-5x3": SystolicParams(rows=5, cols=3, fmt="bf16", moving_max=16),
    "fp8_e4m3-3x2-double": SystolicParams(rows=3, cols=2, fmt="fp8_e4m3", moving_max=16,
                                          double_rate=True),
}

# The remaining formats, each on a small array. Each distinct parameter set costs a Verilator
# C++ build of tens of seconds, so these run on one simulator: Icarus where it is installed
# (it builds in a second), else Verilator.
FORMATS = {
    "fp8_e4m3": SystolicParams(rows=2, cols=2, fmt="fp8_e4m3", moving_max=8),
    "fp8_e4m3fn": SystolicParams(rows=2, cols=2, fmt="fp8_e4m3fn", moving_max=8),
    "fp8_e5m2-double": SystolicParams(rows=2, cols=2, fmt="fp8_e5m2", moving_max=8,
                                      double_rate=True),
    "cfp8_e4m3_b10": SystolicParams(rows=2, cols=2, fmt="cfp8_e4m3_b10", moving_max=8),
    "cfp8_e5m2_b12": SystolicParams(rows=2, cols=2, fmt="cfp8_e5m2_b12", moving_max=8),
    "tf32": SystolicParams(rows=2, cols=2, fmt="tf32", moving_max=8),
    "fp32": SystolicParams(rows=2, cols=2, fmt="fp32", moving_max=8),
}


@pytest.mark.cocotb
@pytest.mark.parametrize("name", list(PARAMS))
def test_systolic(name, sim, seed):
    result = simulate(PARAMS[name], sim, seed)
    assert result.ok, f"{result} (seed {seed})"


@pytest.mark.cocotb
def test_systolic_flat_emission(sim, seed):
    """The flat elaboration passes the same bench as the hierarchical emission."""
    result = simulate(SystolicParams(rows=4, cols=4, fmt="int8", moving_max=16), sim, seed,
                      hierarchical=False)
    assert result.ok, f"{result} (seed {seed})"


@pytest.mark.cocotb
@pytest.mark.parametrize("name", list(FORMATS))
def test_systolic_format(name, seed):
    runner.skip_unless_available("icarus")
    result = simulate(FORMATS[name], "icarus", seed)
    assert result.ok, f"{result} (seed {seed})"
