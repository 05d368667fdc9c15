"""The simulator runner: its build cache under build/sim/ and the shared store beside it (a
damaged build is detected and built again, another checkout takes an intact build from the
store), and what a failing bench reports."""

from __future__ import annotations

import hashlib
import json

import pytest

from sim.tb.runner import build, emit_verilog, run_verilog, skip_unless_available
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
