"""Coverage: Verilator's counts read, merged across runs and instances, summarised and
reported per module (sim.tb.coverage), collected by the runner, and asked for by `gen sim`."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from generators.cli import main
from sim.tb.coverage import merge, read, summarise, write_report
from sim.tb.runner import collecting_coverage, emit_verilog, run_verilog, skip_unless_available
from sim.tb.test_streams import StreamPipe

SOURCE = """module top(clk);
  input clk;
  reg \\$auto$verilog_backend.cc:2355:dump_module$1  = 0;
  always @(posedge clk) begin
    x <= 1;
  end
  always @* begin
    if (\\$auto$verilog_backend.cc:2355:dump_module$1 ) begin end
    y = x;
  end
endmodule
"""


def _point(file, line, kind, page, name, count, hier="top", span=None):
    fields = {"f": file, "l": line, "n": 3, "t": kind, "page": f"v_{page}/top", "o": name,
              **({"S": span} if span else {}), "h": hier}
    body = "".join(f"\x01{k}\x02{v}" for k, v in fields.items())
    return f"C '{body}' {count}\n"


def test_counts_merge_by_module_position_and_name_across_runs_and_instances(tmp_path):
    src = tmp_path / "top.v"
    src.write_text(SOURCE)
    f = str(src)
    one = tmp_path / "one.dat"
    one.write_text("# SystemC::Coverage-3\n"
                   + _point(f, 4, "line", "line", "block", 5, span="4-5,7")
                   + _point(f, 4, "line", "line", "block", 2, hier="top.other", span="4-5,7")
                   + _point(f, 9, "line", "line", "block", 0)
                   + _point(f, 2, "toggle", "toggle", "x__024q[0]:0->1", 0)
                   + _point(f, 8, "branch", "branch", "if", 0)        # the backend's trigger
                   + _point(f, 3, "toggle", "toggle", "__024auto__024verilog_backend:0->1", 0))
    two = tmp_path / "two.dat"
    two.write_text(_point(f, 9, "line", "line", "block", 3)
                   + _point(f, 2, "toggle", "toggle", "x__024q[0]:0->1", 0))
    points = read(one)
    assert sorted(points.values()) == [0, 0, 7]          # two instances summed, trigger gone
    block = next(p for p in points if p.line == 4)
    assert block.lines == (4, 5, 7) and block.module == "top"
    toggle = next(p for p in points if p.kind == "toggle")
    assert toggle.name == "x$q[0]:0->1"
    merged = merge([one, two])
    cov = summarise(merged)["top"]
    assert cov.lines == [2, 2] and cov.toggles == [0, 1]
    assert [p.name for p in cov.uncovered] == ["x$q[0]:0->1"]
    summary = write_report(merged, tmp_path / "report")
    assert summary["top"].lines == [2, 2]
    assert (tmp_path / "report" / "top.uncovered.txt").read_text() == (
        f"{f}:2: x$q[0]:0->1\n")
    page = (tmp_path / "report" / "top.html").read_text()
    assert '<span class="hit">     4          7   always @(posedge clk) begin</span>' in page
    assert "x$q[0]:0-&gt;1" in page
    assert 'href="top.html"' in (tmp_path / "report" / "index.html").read_text()


def test_a_verilator_run_counts_its_coverage():
    skip_unless_available("verilator")
    text = emit_verilog(StreamPipe(), "stream_pipe")
    with collecting_coverage():
        result = run_verilog(text, "stream_pipe", "sim.tb.test_streams", "verilator",
                             {"seed": 1}, testcase="left_over")
    assert result.ok and result.coverage is not None
    cov = summarise(read(result.coverage))["stream_pipe"]
    assert 0 < cov.lines[0] <= cov.lines[1] and 0 < cov.toggles[0] < cov.toggles[1]


def test_a_run_counts_only_the_kinds_asked_for():
    """Line coverage alone: a build without toggle counters, the build the core is counted
    with."""
    skip_unless_available("verilator")
    text = emit_verilog(StreamPipe(), "stream_pipe")
    with collecting_coverage(("line",)):
        result = run_verilog(text, "stream_pipe", "sim.tb.test_streams", "verilator",
                             {"seed": 1}, testcase="left_over")
    assert result.ok and result.coverage is not None
    cov = summarise(read(result.coverage))["stream_pipe"]
    assert 0 < cov.lines[0] <= cov.lines[1] and cov.toggles == [0, 0]
    with pytest.raises(ValueError, match="expected coverage kinds among"):
        with collecting_coverage(("branch",)):
            pass


def test_coverage_of_needs_coverage():
    result = CliRunner().invoke(main, ["sim", "trn2", "--unit", "link", "--sim", "verilator",
                                       "--coverage-of", "line"])
    assert result.exit_code == 2
    assert "--coverage-of line is an option of --coverage DIR" in result.output


def test_coverage_needs_verilator():
    result = CliRunner().invoke(main, ["sim", "trn2", "--unit", "link", "--sim", "icarus",
                                       "--coverage", "out"])
    assert result.exit_code == 2
    assert "expected --sim verilator, found --sim icarus" in result.output
