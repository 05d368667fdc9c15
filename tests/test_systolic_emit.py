"""The tensor generator's emission: deterministic, headed, listed, and Verilator -Wall clean."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from generators.tensor import TOP, WAIVERS, emit, module_names
from hdl.tensor.params import SystolicParams
from sim.tb.runner import setup_verilator_env

HEADER = "trngen test header\nspec sha256 0123abcd"


def _verilator() -> str | None:
    env = setup_verilator_env(dict(os.environ))
    return shutil.which("verilator", path=env.get("PATH"))


@pytest.mark.parametrize("params", [
    SystolicParams(rows=1, cols=1, formats=("int8",), moving_max=1),
    SystolicParams(rows=5, cols=3, formats=("bf16",), moving_max=16),
    SystolicParams(rows=2, cols=4, formats=("int8", "fp8_e5m2", "bf16", "fp32"),
                   double_rate=("fp8_e5m2",), moving_max=8),
    SystolicParams(rows=4, cols=8, formats=("int8", "fp8_e4m3", "bf16", "fp32", "mxfp8"),
                   double_rate=("fp8_e4m3",), quarter_rate=("fp32",), moving_max=8,
                   tiles=(1, 2, 4)),
], ids=["int8-1x1", "bf16-5x3", "mixed-2x4", "tiled-4x8"])
def test_lint_clean(params, tmp_path):
    if _verilator() is None and os.environ.get("CI") != "true":
        pytest.skip("verilator is not installed")
    files = emit(params, tmp_path, HEADER)
    env = setup_verilator_env(dict(os.environ))
    proc = subprocess.run(
        ["verilator", "--lint-only", "-Wall", "--top-module", TOP, f"{TOP}.vlt",
         "-f", f"{TOP}.f"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "%Warning" not in proc.stderr and "%Error" not in proc.stderr, proc.stderr
    assert [f.name for f in files][-2:] == [f"{TOP}.vlt", f"{TOP}.f"]
    # The waiver file lists exactly the documented rules.
    rules = [line.split()[-1] for line in (tmp_path / f"{TOP}.vlt").read_text().splitlines()
             if line.startswith("lint_off")]
    assert rules == list(WAIVERS)


def test_emission_is_deterministic_and_headed(tmp_path):
    params = SystolicParams(rows=3, cols=2, formats=("fp16",), moving_max=4)
    first = {f.name: f.read_text() for f in emit(params, tmp_path / "a", HEADER)}
    second = {f.name: f.read_text() for f in emit(params, tmp_path / "b", HEADER)}
    assert first == second
    names = module_names()
    assert set(first) == {f"{names[k]}.v"
                          for k in ("pe", "row", "column", "group", "control", "top")} \
        | {f"{TOP}.vlt", f"{TOP}.f"}
    for name, text in first.items():
        comment = "#" if name.endswith(".f") else "//"
        assert text.startswith(f"{comment} trngen test header\n{comment} spec sha256 0123abcd\n")
        assert str(tmp_path) not in text and "/home" not in text and "/work" not in text
    listed = [line for line in first[f"{TOP}.f"].splitlines() if not line.startswith("#")]
    assert listed[-1] == f"{TOP}.v" and len(listed) == 6
    # Each module is defined once, and the top instantiates rows and columns by generate loop.
    top = first[f"{TOP}.v"]
    assert top.count(f"{names['row']} row_unit") == 1
    assert top.count(f"{names['column']} column_unit") == 1


def test_emission_writes_only_changed_files(tmp_path):
    params = SystolicParams(rows=2, cols=2, formats=("int8",), moving_max=4)
    files = emit(params, tmp_path, HEADER)
    stamps = {f: f.stat().st_mtime_ns for f in files}
    os.utime(files[0], ns=(1, 1))
    emit(params, tmp_path, HEADER)
    assert files[0].stat().st_mtime_ns == 1
    assert all(f.stat().st_mtime_ns == stamps[f] for f in files[1:])


def test_quarter_rate_gate_only_with_a_quarter_rate_format():
    """The runner's phase counter (a multiply taking a moving word every fourth cycle) exists
    only in an array with a quarter-rate format; elsewhere no multiply waits for a column."""
    from amaranth.back import rtlil

    from hdl.tensor.sequencer import SystolicGroup

    for quarter in ((), ("fp32",)):
        params = SystolicParams(rows=2, cols=2, formats=("bf16", "fp32"), quarter_rate=quarter,
                                moving_max=4)
        runner = rtlil.convert(SystolicGroup(params), name="group")
        assert ("\\phase" in runner) == bool(quarter)
