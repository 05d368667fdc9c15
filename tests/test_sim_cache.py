"""The simulator build cache under build/sim/: a damaged build is detected and built again."""

from __future__ import annotations

import hashlib
import json

import pytest

from sim.tb.runner import build, emit_verilog, run_verilog, skip_unless_available
from sim.tb.test_streams import StreamPipe


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

