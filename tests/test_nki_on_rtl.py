"""NKI kernels on the core RTL: `gen nki FILE --rtl` traces each launch for the core at
simulation scale, runs it on the core simulator and co-simulates it on the core RTL, every
byte of SBUF, PSUM and HBM compared."""

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from generators.cli import main
from sim.tb.runner import skip_unless_available

HERE = Path(__file__).parent / "nki_kernels"


def _nki(*args):
    return CliRunner().invoke(main, ["nki", *map(str, args)])


@pytest.mark.cocotb
def test_the_test_kernels_that_fit_run_on_the_core_rtl():
    """Every launch of on_core_rtl.py (twenty-four test kernels at 16 partitions: reductions,
    an activation with its reduction, a transpose, index expressions, scalar_tensor_tensor,
    both scans, a partition broadcast, bn_stats, a matmul, a cast to int8, transposes on
    the vector and tensor engines, a vector stream of 30x instructions, longer than a
    sequencer's ring, copies from run-time offsets, range selects, max8, max8 with
    nc_find_index8 and nc_match_replace8, sequence_bounds, nl.rand and nisa.dropout, rows
    gathered by an indirect DMA and added into rows by it in fp32 and bf16, an
    nl.dynamic_range over a loaded register, some named more than once) in one
    simulation."""
    skip_unless_available("verilator")
    result = _nki(HERE / "on_core_rtl.py", "--spec", "trn2", "--rtl", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["kernel"] for r in rows] == [
        "row_stats", "bias_activation", "transpose_tile", "swap_blocks", "window_stats", "stt",
        "scan", "scan_reversed", "partition_broadcast", "stats", "matmul_plain", "to_int8",
        "transposes", "steps", "columns_at", "ranges", "largest", "top8", "bounds",
        "draws", "gather", "scatter_add", "scatter_add", "blocks_doubled"]
    for r in rows:
        assert r["rtl"]["failures"] == [], r
        assert r["rtl"]["sim"] == "verilator"


def test_a_kernel_the_rtl_cannot_run_is_refused_before_simulating():
    """The simulator runs it; the core RTL's GpSimd engine has no gather_flattened."""
    result = _nki(HERE / "isa_more.py", "--kernel", "gathered", "--spec", "trn2",
                  "--shape", "x=16x4x16:fp32,idx=16x10:uint32", "--rtl")
    assert result.exit_code == 2, result.output
    assert re.fullmatch(rf"error: gathered \({re.escape(str(HERE / 'isa_more.py'))}:\d+\): "
                        r"the core RTL cannot run it: gpsimd\[\d+\] GatherFlattened: the "
                        r"gpsimd engine runs Iota, .*\n", result.output), result.output


def test_a_kernel_is_traced_for_the_simulation_scale():
    """With --rtl, a tile of NKI's 128 partitions is the kernel's error on the 16-partition
    core, at its line."""
    result = _nki(HERE / "isa_more.py", "--kernel", "memset_tile", "--spec", "trn2",
                  "--shape", "x=128x256:fp32", "--rtl")
    assert result.exit_code == 2, result.output
    assert result.output == (f"error: {HERE / 'isa_more.py'}:37: number of partitions 128 "
                             "exceed architecture limitation of 16 "
                             "[err_num_partition_exceed_arch_limit]\n")


def test_rtl_needs_data():
    result = _nki(HERE / "isa_more.py", "--kernel", "to_int8", "--shape", "x=16x12:fp32",
                  "--rtl", "--timing-only")
    assert result.exit_code == 2, result.output
    assert result.output == "error: --rtl compares results: expected no --timing-only\n"
