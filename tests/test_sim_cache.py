"""The simulator runner: its build cache under build/sim/ and the shared store beside it (a
damaged build is detected and built again, another checkout takes an intact build from the
store), and what a failing bench reports."""

from __future__ import annotations

import hashlib
import json

import pytest

from sim.tb.runner import (
    CCACHE_SIZE,
    build,
    emit_verilog,
    run_verilog,
    setup_verilator_env,
    skip_unless_available,
)
from sim.tb.test_streams import StreamPipe
from specs.store import Store


@pytest.mark.parametrize("damage", ["truncated", "stamp-garbage", "source-changed"])
def test_a_damaged_build_is_built_again(tmp_path, damage):
    skip_unless_available("icarus")
    text = emit_verilog(StreamPipe(), "stream_pipe")
    build_dir = build(text, "stream_pipe", "icarus", tmp_path)
    vvp, stamp = build_dir / "sim.vvp", build_dir / ".built"
    good = vvp.read_bytes()
    assert json.loads(stamp.read_text())["artifact"] == "sim.vvp"
    built = stamp.stat().st_mtime_ns
    assert build(text, "stream_pipe", "icarus", tmp_path) == build_dir    # intact: reused
    assert stamp.stat().st_mtime_ns == built
    if damage == "truncated":
        vvp.write_bytes(good[: len(good) // 2])
    elif damage == "stamp-garbage":
        stamp.write_bytes(b"\x00\xff not json")
    else:
        (build_dir / "stream_pipe.v").write_text("module stream_pipe(); endmodule\n")
    mtime = stamp.stat().st_mtime_ns if stamp.exists() else None
    assert build(text, "stream_pipe", "icarus", tmp_path) == build_dir
    assert len(vvp.read_bytes()) > len(good) // 2      # the whole artifact, built anew
    assert json.loads(stamp.read_text())["sha256"] == hashlib.sha256(vvp.read_bytes()).hexdigest()
    assert stamp.stat().st_mtime_ns != mtime            # it was built again, not trusted
    result = run_verilog(text, "stream_pipe", "sim.tb.test_streams", "icarus", {"seed": 1},
                         testcase="left_over", build_root=tmp_path)
    assert result.ok, result



def test_a_fresh_checkout_takes_its_build_from_the_shared_store(tmp_path, monkeypatch):
    """A second checkout (another build root) copies the stored artifact instead of
    compiling; a damaged stored artifact is compiled again and the store mended."""
    skip_unless_available("icarus")
    import cocotb_tools.runner

    text = emit_verilog(StreamPipe(), "stream_pipe")
    store = Store("sim", tmp_path / "store")
    first = build(text, "stream_pipe", "icarus", tmp_path / "a", store)
    (entry,) = store.path.iterdir()
    entry = entry / "files"
    assert entry.parent.name == f"icarus-{first.name}" and (
        entry / "sim.vvp").read_bytes() == (first / "sim.vvp").read_bytes()

    compile_ = cocotb_tools.runner.get_runner
    monkeypatch.setattr(cocotb_tools.runner, "get_runner",
                        lambda sim: pytest.fail("compiled although the store had the build"))
    second = build(text, "stream_pipe", "icarus", tmp_path / "b", store)
    assert (second / "sim.vvp").read_bytes() == (first / "sim.vvp").read_bytes()
    assert not (second / "build.log").exists()
    monkeypatch.setattr(cocotb_tools.runner, "get_runner", compile_)
    result = run_verilog(text, "stream_pipe", "sim.tb.test_streams", "icarus", {"seed": 1},
                         testcase="left_over", build_root=tmp_path / "b")
    assert result.ok, result

    good = (entry / "sim.vvp").read_bytes()
    (entry / "sim.vvp").write_bytes(good[: len(good) // 2])
    third = build(text, "stream_pipe", "icarus", tmp_path / "c", store)
    assert (third / "build.log").is_file()      # compiled: the damaged copy was not taken
    assert not list(third.glob(".*.tmp"))
    stored = json.loads((entry / ".built").read_text())["sha256"]
    assert stored == hashlib.sha256((entry / "sim.vvp").read_bytes()).hexdigest()


def test_a_failing_bench_shows_its_assertion(tmp_path):
    """Under pytest, cocotb's runner ends a failing run with SystemExit; the result still
    comes back, and it carries the failed test's assertion text."""
    skip_unless_available("icarus")
    text = emit_verilog(StreamPipe(), "stream_pipe")
    result = run_verilog(text, "stream_pipe", "sim.tb.test_streams", "icarus", {"seed": 1},
                         testcase="off_by_one", build_root=tmp_path)
    assert not result.ok and (result.tests, result.failures) == (1, 1)
    assert result.messages == (
        "off_by_one: AssertionError: the pipeline gave 41 for 40, expected 42\n"
        "assert 41 == 42",)
    assert "the pipeline gave 41 for 40, expected 42" in str(result)


def test_stored_verilog_emits_once_per_function_arguments_and_code(tmp_path, monkeypatch):
    """The second request of the same text is the stored one, not a new elaboration; other
    arguments are a new one."""
    from hdl.tensor import structural
    from hdl.tensor.params import SystolicParams
    from sim.tb.runner import stored_verilog
    from sim.tb.systolic import harness_verilog

    monkeypatch.setenv("TRNGEN_CACHE", str(tmp_path))
    params = SystolicParams(rows=1, cols=1, formats=("bf16",), moving_max=4)
    first = stored_verilog(harness_verilog, params)
    assert first == harness_verilog(params)

    def refuse(*args, **kwargs):
        raise AssertionError("elaborated again")

    monkeypatch.setattr(structural, "verilog_modules", refuse)
    assert stored_verilog(harness_verilog, params) == first
    with pytest.raises(AssertionError, match="elaborated again"):
        stored_verilog(harness_verilog, SystolicParams(rows=1, cols=1, formats=("fp16",),
                                                       moving_max=4))
    with pytest.raises(TypeError, match="module-level function"):
        stored_verilog(lambda p: harness_verilog(p), params)


def _module(name: str, body: str, filler: int = 0) -> str:
    return f"module {name}(clk);\n  input clk;\n{body}  // {'x' * filler}\nendmodule\n"


def test_hier_blocks_are_the_highest_repeated_modules_counting_generate_loops():
    """A module verilated on its own is one repeated often enough (generate loops multiply
    its instances), large enough with what is below it, and not inside another block."""
    from sim.tb.runner import hier_blocks

    loop = ("  genvar r;\n  generate\n    for (r = 0; r < ROWS; r = r + 1) begin : row\n"
            "      row row_unit (.clk(clk));\n    end\n  endgenerate\n")
    text = (_module("pe", "", filler=300)
            + _module("row", "".join(f"  pe pe_{i} (\n    .clk(clk)\n  );\n" for i in range(8)))
            + _module("array", "  localparam ROWS = 6;\n" + loop)
            + _module("small", "")
            + _module("\\top.ctl", "  small s (\n    .clk(clk)\n  );\n")
            + _module("top", "  array a (\n    .clk(clk)\n  );\n"
                      + "".join(f"  small s{i} (\n    .clk(clk)\n  );\n" for i in range(9))
                      + "  \\top.ctl  ctl (\n    .clk(clk)\n  );\n"))
    # 6 rows (the loop), 48 PEs: the rows are the blocks, the PEs inside them are not;
    # 10 small modules are too small, one array too few.
    assert hier_blocks(text, "top", 4, 300) == ("row",)
    assert hier_blocks(text, "top", 7, 300) == ("pe",)       # 6 rows are too few
    assert hier_blocks(text, "top", 4, 10_000) == ()
    assert hier_blocks(text, "top", 10, 100) == ("pe",)      # small: 10, but too small
    assert hier_blocks(text, "top", 10, 0) == ("pe", "small")
    assert hier_blocks(text, "missing", 1, 0) == ()


def test_verilator_builds_compile_through_ccache_in_the_trngen_cache(tmp_path, monkeypatch):
    """With ccache on PATH, Verilator's OBJCACHE is ccache and its cache is the trngen
    cache's ccache/; without it, nothing is set; settings of the caller's are kept."""
    monkeypatch.setenv("TRNGEN_CACHE", str(tmp_path / "cache"))
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "ccache"
    fake.write_text("#!/bin/sh\nexec \"$@\"\n")
    fake.chmod(0o755)
    env = setup_verilator_env({"PATH": str(tools)})
    assert env["OBJCACHE"] == "ccache"
    assert env["CCACHE_DIR"] == str(tmp_path / "cache" / "ccache")
    assert env["CCACHE_MAXSIZE"] == CCACHE_SIZE
    kept = setup_verilator_env({"PATH": str(tools), "OBJCACHE": "", "CCACHE_DIR": "/x"})
    assert kept["OBJCACHE"] == "" and kept["CCACHE_DIR"] == "/x"
    bare = setup_verilator_env({"PATH": str(tmp_path / "none")})
    assert "OBJCACHE" not in bare and "CCACHE_DIR" not in bare
