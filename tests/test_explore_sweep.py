"""Sweep specs: bad input is reported with file:line:col, key path, expected and found."""

import re

import numpy as np
import pytest

from explore import sweep
from specs.errors import SpecError

BASE = """sweep:
  name: t
  base: trn2.48xlarge
  parameters:
    rows: [64, 128]
  workloads: [llama2-7b]
"""

CASES = {
    "unknown parameter": (
        BASE.replace("    rows:", "    rowz:"),
        "t.yaml:5:5: sweep.parameters.rowz: expected one of the legal values, found 'rowz'; "
        "did you mean 'rows'? (legal: rows, cols, cores, clock, sbuf, hbm_bandwidth, "
        "hbm_capacity, link_bandwidth, chips, lnc, nodes)"),
    "wrong dimension": (
        BASE.replace("    rows: [64, 128]", "    clock: [2.4 GHz, 2.9 TB/s]"),
        "t.yaml:5:22: sweep.parameters.clock[1]: expected a frequency such as '2.4 GHz', "
        "found '2.9 TB/s' (a bandwidth)"),
    "fractional count": (
        BASE.replace("[64, 128]", "[64, 128.5]"),
        "t.yaml:5:16: sweep.parameters.rows[1]: expected a positive integer, found 128.5"),
    "count as text": (
        BASE.replace("[64, 128]", "['64', 128]"),
        "t.yaml:5:12: sweep.parameters.rows[0]: expected a positive integer, found '64'"),
    "two range rules": (
        BASE.replace("[64, 128]", "{start: 32, stop: 128, step: 32, num: 4}"),
        "t.yaml:5:5: sweep.parameters.rows: expected exactly one of step, factor or num, "
        "found step, num"),
    "range backwards": (
        BASE.replace("[64, 128]", "{start: 128, stop: 64, factor: 2}"),
        "t.yaml:5:30: sweep.parameters.rows.stop: expected stop >= start, found 64 < 128"),
    "misspelt key": (
        BASE.replace("  base:", "  bsae:"),
        "t.yaml:3:3: sweep.bsae: unknown key 'bsae'; did you mean 'base'? (legal: name, title, "
        "base, parameters, constraints, workloads, metrics, price, execution, plots)"),
    "unknown top-level key": (
        BASE + "sweeps: 1\n",
        "t.yaml:7:1: sweeps: unknown top-level key 'sweeps'; did you mean 'sweep'? "
        "(legal: sweep)"),
    "unknown workload": (
        BASE.replace("llama2-7b", "llama-7b"),
        "t.yaml:6:15: sweep.workloads[0]: names a workload that does not exist: expected a "
        "workload file or a bundled workload name, found 'llama-7b'; did you mean "
        "'llama2-7b'?"),
    "unknown base": (
        BASE.replace("trn2.48xlarge", "trn2.48xlarg"),
        "t.yaml:3:9: sweep.base: names a base spec that does not exist: expected a spec file "
        "or a bundled spec name, found 'trn2.48xlarg'; did you mean 'trn2.48xlarge'?"),
    "constraint without bound": (
        BASE + "  constraints:\n    - {quantity: pe_per_chip}\n",
        "t.yaml:8:7: sweep.constraints[0]: expected at least one of equal, min or max, "
        "found none"),
    "unknown metric": (
        BASE + "  metrics: [step_time, tokens_per_secnd]\n",
        "t.yaml:7:24: sweep.metrics[1]: expected one of the legal values, found "
        "'tokens_per_secnd'; did you mean 'tokens_per_second'?"),
    "price shares": (
        BASE + "  price: {base: 44.7 USD/h, shares: {chips: 0.5, pe: 0.4}}\n",
        "t.yaml:7:3: sweep.price: expected non-negative shares summing to 1, found a sum "
        "of 0.9"),
    "price without time": (
        BASE + "  price: {base: 44.7 USD}\n",
        "t.yaml:7:17: sweep.price.base: expected a price such as '12.5 USD/h', found "
        "'44.7 USD'"),
    "chips without links": (
        BASE.replace("trn2.48xlarge", "trn2").replace("rows: [64, 128]", "chips: [1, 2]"),
        "t.yaml:5:12: sweep.parameters.chips: expected chips of 1 for a base without "
        "chip-to-chip links (trn2), found 2"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sweep_errors_name_file_line_path_expected_found(tmp_path, case):
    text, message = CASES[case]
    f = tmp_path / "t.yaml"
    f.write_text(text)
    with pytest.raises(SpecError, match="^" + re.escape(message)):
        sweep.load(f)


def test_ranges_lists_and_constraints_make_the_grid(tmp_path):
    f = tmp_path / "t.yaml"
    f.write_text("""sweep:
  name: t
  base: trn2.48xlarge
  parameters:
    rows: {start: 32, stop: 256, factor: 2}
    cols: [256, 32, 64, 128, 64]
    clock: {start: 1.6 GHz, stop: 2.4 GHz, step: 0.4 GHz}
    hbm_bandwidth: {start: 1 TB/s, stop: 4 TB/s, num: 3, spacing: log}
    lnc: [1, 2, 3]
  constraints:
    - {quantity: pe_per_core, equal: 16384}
    - {quantity: peak_flops_chip, max: 700 TFLOPS}
  workloads: [llama2-7b, {name: llama2-70b, tensor: 16}]
""")
    sw = sweep.load(f)
    assert sw.grid["rows"].tolist() == [32, 64, 128, 256]
    assert sw.grid["cols"].tolist() == [32, 64, 128, 256]
    assert sw.grid["clock"].tolist() == pytest.approx([1.6e9, 2.0e9, 2.4e9])
    assert sw.grid["hbm_bandwidth"].tolist() == pytest.approx([1e12, 2e12, 4e12])
    assert [w.tensor for w in sw.workloads] == [4, 16]
    points, dropped = sw.points()
    # rows x cols = 16384 keeps (64, 256), (128, 128), (256, 64); lnc 3 does not divide 8
    # cores; 2 x 16384 x 8 x clock <= 700 TFLOPS keeps clocks up to 2.67 GHz: all three.
    assert len(points["rows"]) == 3 * 3 * 3 * 2
    assert dropped == 4 * 4 * 3 * 3 * 3 - len(points["rows"])
    assert np.all(points["rows"] * points["cols"] == 16384)
    assert set(points["lnc"]) == {1.0, 2.0}
    assert np.all(points["cores"] == 8) and np.all(points["chips"] == 16)


@pytest.mark.parametrize("name", sweep.bundled())
def test_bundled_sweeps_load(name):
    sw = sweep.load(name)
    points, _ = sw.points()
    assert len(points["rows"]) > 0


def test_readme_examples_load(tmp_path):
    from pathlib import Path

    from explore import workloads

    text = (Path(sweep.__file__).parent / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    assert len(blocks) == 2
    (tmp_path / "example.yaml").write_text(blocks[0])
    sw = sweep.load(tmp_path / "example.yaml")
    points, dropped = sw.points()
    assert len(points["rows"]) > 0 and dropped > 0
    (tmp_path / "w.yaml").write_text(blocks[1])
    assert workloads.load(tmp_path / "w.yaml").flops() == workloads.load("llama2-7b").flops()
