"""What a user reads is whole: every command that prints a table, its output not a terminal
(a pipe, a file, a log), prints every cell whole on one line, with COLUMNS unset, at 80 and
with colours forced; no cell is cut to an ellipsis.

Each table's cells are read back from the output and compared with the figures and names the
model computes, through its own API.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

import kernels
from generators.cli import main
from generators.cli.checkreport import to_table
from hdl.params import core_params
from sim.system import execute, model
from sim.system.check import FIELDS, check
from sim.system.collectives import CHUNK
from specs.loader import bundled, load, load_document

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("trn2", "trn2.48xlarge", "trn2-ultraserver")
#: trn2's tensor engine at 8 cores x 128 x 128 PEs x 2 FLOP x 2.4 GHz, twice that in fp8.
TRN2_FP8_CHIP = 2 * 8 * 128 * 128 * 2 * 2.4e9
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

#: The environments a non-terminal output is printed in.
ENVIRONMENTS = {
    "no COLUMNS": {"COLUMNS": None, "FORCE_COLOR": None, "TTY_COMPATIBLE": None},
    "COLUMNS=80": {"COLUMNS": "80", "FORCE_COLOR": None, "TTY_COMPATIBLE": None},
    "colours forced": {"COLUMNS": "80", "FORCE_COLOR": "1", "TTY_COMPATIBLE": None},
}


@pytest.fixture(params=list(ENVIRONMENTS))
def gen(request):
    """Run `gen ARGS` through the CLI with stdout and stderr not a terminal; returns
    (stdout, stderr) with colour codes removed."""

    def run(*args):
        result = CliRunner(env=ENVIRONMENTS[request.param]).invoke(main, list(args))
        assert result.exit_code == 0, result.output
        out, err = ANSI.sub("", result.stdout), ANSI.sub("", result.stderr)
        assert "…" not in out + err
        return out, err

    return run


def boxed_rows(text: str) -> list[tuple[str, ...]]:
    """The body rows of the boxed tables in ``text``, each a tuple of its stripped cells."""
    return [tuple(cell.strip() for cell in line.split("│")[1:-1])
            for line in text.splitlines() if line.startswith("│")]


def header(text: str) -> list[str]:
    return [cell.strip() for cell in text.split("┃")[1:-1]]


@pytest.fixture(scope="module")
def reports():
    return check(list(CHECKED))[0]


def test_check(gen, reports):
    out, _ = gen("check", *CHECKED)
    assert boxed_rows(out) == [tuple(r.text(f) for f in FIELDS)
                               for rep in reports for r in rep.rows]
    heads = [header(line) for line in out.splitlines() if line.startswith("┃")]
    assert heads == [list(FIELDS)] * len(CHECKED)
    for rep in reports:
        assert f"{rep.title} ({rep.spec})" in out
    trn2 = load("trn2")
    fp8 = [c.magnitude() for c in trn2.claims if c.quantity == "compute.fp8" and not c.level]
    assert fp8, "trn2 claims its chip's fp8 compute"
    for claimed in fp8:
        assert re.search(rf"│ chip +│ compute\.fp8 +│ +{TRN2_FP8_CHIP / 1e12:.5g} TFLOPS │ +"
                         rf"{claimed.to('TFLOPS').magnitude:g} TFLOPS │", out)


def test_check_through_a_pipe(reports):
    """`gen check trn2 | less`: a real pipe, COLUMNS unset."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "generators.cli", "check", "trn2"], env=env,
                          cwd=ROOT, capture_output=True, check=True)
    out = proc.stdout.decode("utf-8")
    assert "…" not in out
    assert boxed_rows(out) == [tuple(r.text(f) for f in FIELDS) for r in reports[0].rows]


def test_check_on_a_narrow_terminal_wraps_cells(reports):
    """On an 80-column terminal the cells that do not fit wrap onto more lines; no character
    of any cell is lost."""
    out = io.StringIO()
    to_table(reports[:1], Console(file=out, width=80, force_terminal=True, color_system=None))
    text = out.getvalue()
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    columns = ["".join(c).replace(" ", "") for c in zip(*boxed_rows(text), strict=True)]
    for i, f in enumerate(FIELDS):
        assert columns[i] == "".join(r.text(f) for r in reports[0].rows).replace(" ", "")


def test_list(gen):
    out, _ = gen("list")
    want = []
    for kind, names in bundled().items():
        for name in names:
            spec = load_document(name).spec
            extra = (f"{spec.cores} x NeuronCore-{spec.neuron_core}" if kind == "chip"
                     else f"{spec.level}: {spec.count} x {spec.member}")
            want.append((kind, name, spec.title, extra))
    assert boxed_rows(out) == want


def test_kernels(gen):
    out, _ = gen("kernels")
    assert boxed_rows(out) == [
        (k.name, ",".join(f"{d}={v}" for d, v in k.example.items()), " ".join(k.dtypes),
         k.summary) for k in kernels.KERNELS.values()]


def _leaves(value, prefix=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else k)
    else:
        yield prefix, value


def test_diff(gen):
    out, _ = gen("diff", "trn1", "trn2")
    a, b = (dict(_leaves({k: v for k, v in load(n).model_dump(mode="json").items()
                          if k not in ("claims", "assumptions")})) for n in ("trn1", "trn2"))
    rows = boxed_rows(out)
    assert [r[0] for r in rows] == sorted(k for k in set(a) | set(b)
                                          if a.get(k, "-") != b.get(k, "-"))
    text = {list: lambda v: ", ".join(map(str, v)), type(None): lambda v: "null"}
    for key, was, now in rows:
        for side, cell in ((a, was), (b, now)):
            value = side.get(key, "-")
            assert cell == text.get(type(value), str)(value)
    assert f"{len(rows)} fields differ." in out


def _plain_rows(text: str, first: str) -> list[list[str]]:
    """The lines of the borderless table whose header starts with ``first``, split on runs
    of two or more spaces."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [first])
    out = []
    for line in lines[start:]:
        cells = re.split(r" {2,}", line.strip())
        if out and len(cells) != len(out[0]):
            break
        out.append(cells)
    return out


def test_run_a_kernel(gen):
    out, _ = gen("run", "trn2", "gemm_naive", "--timing-only")
    k = kernels.KERNELS["gemm_naive"]
    res = kernels.run(core_params(load("trn2")), k, dict(k.example), k.dtypes[0],
                      timing_only=True).result
    table = _plain_rows(out, "engine")
    assert table[0] == ["engine", "instructions", "busy", "busy %", "cycles"]
    assert [(r[0], r[1]) for r in table[1:]] == [(e, f"{res.instructions[e]:,}")
                                                 for e in res.busy]


def test_run_a_collective(gen):
    out, _ = gen("run", "trn2.48xlarge", "--collective", "all_reduce", "--size", "64 MiB")
    system = model.build(load_document("trn2.48xlarge").file)
    r = execute.run(system, "all_reduce", 64 * 2**20, chunk=CHUNK, dtype="fp32")
    util = r.utilisation()
    table = _plain_rows(out, "links")
    assert table[0] == ["links", "count", "bytes each (max)", "min %", "mean %", "max %"]
    assert [row[0] for row in table[1:]] == sorted({f"torus dim {d}"
                                                     for d in r.link_dims.values()})
    for name in sorted(util, key=lambda n: (-util[n], n))[:4]:   # the busiest links
        assert re.search(rf"^   {re.escape(name)} +1 +[0-9.]+ [KMG]iB +"
                         rf"{100 * util[name]:.1f} *$", out, re.MULTILINE), name


def test_step(gen):
    from explore import step, step_cli

    out, _ = gen("step", "trn1.32xlarge", "llama2-7b", "--tp", "8", "--nodes", "16")
    r = step_cli.from_cli("trn1.32xlarge", "llama2-7b", tp=8, nodes=16).result
    table = _plain_rows(out, "part")
    assert table == [["part", "seconds", "share"],
                     *([p, f"{r.parts[p]:.4g}", f"{100 * r.parts[p] / r.step_time:.1f} %"]
                       for p in step.PARTS),
                     ["step", f"{r.step_time:.4g}", "100.0 %"]]


def test_step_grid(gen):
    from explore import step, step_cli

    out, _ = gen("step", "trn1-cluster", "llama2-7b", "--tp", "8", "--pp", "1,2",
                 "--nodes", "16,3", "--recompute", "selective,full")
    _, points = step_cli.grid("trn1-cluster", "llama2-7b", tp=[8], pp=[1, 2], nodes=[16, 3],
                          recompute=["selective", "full"])
    ok = points[points["valid"] & points["fits"]].sort_values("sequences_per_second",
                                                              ascending=False)
    table = _plain_rows(out, "nodes")
    assert table[0] == ["nodes", "TP", "PP", "DP", "mb", "recompute", "step s", "seq/s",
                        "MFU %", *step.PARTS]
    assert [row[5:8] for row in table[1:]] == [
        [x.recompute, f"{x.step_time:.4g}", f"{x.sequences_per_second:.4g}"]
        for _, x in ok.iterrows()]


def test_explore_progress(gen, tmp_path):
    """The progress line on stderr keeps the sweep's name whole."""
    name = "a-sweep-whose-name-is-longer-than-half-of-an-eighty-column-line"
    sweep = tmp_path / "long.yaml"
    sweep.write_text(f"sweep:\n  name: {name}\n  base: trn2.48xlarge\n  parameters:\n"
                     "    rows: [64, 128]\n  workloads: [llama2-7b]\n"
                     "  metrics: [valid, step_time, fits]\n")
    _, err = gen("explore", str(sweep), "-o", str(tmp_path / "out"))
    assert re.search(rf"{name} \(in-process\) ━+ 1/1 chunks ", err), err
