"""The link generator: deterministic Verilog, lint clean under its waivers."""

import re
import shutil
import subprocess

import pytest

from generators.link import LINT_WAIVERS, emit
from hdl.link.link import LinkParams
from sim.tb.runner import setup_verilator_env

PARAMS = [
    LinkParams(width=32, credits=1, max_packet=1, replay_depth=1, ack_timeout=64),
    LinkParams(width=24, credits=11, max_packet=7, replay_depth=13, ack_timeout=200),
]


@pytest.mark.parametrize("params", PARAMS, ids=["one", "odd"])
def test_emit_is_deterministic_and_carries_the_header(params, tmp_path):
    files = emit(params, tmp_path / "a", "trngen link\nspec sha 0123")
    again = emit(params, tmp_path / "b", "trngen link\nspec sha 0123")
    assert [f.name for f in files] == ["link_port.v", "link_port.vlt"]
    for x, y in zip(files, again, strict=True):
        assert x.read_bytes() == y.read_bytes()
    text = files[0].read_text()
    assert text.startswith("// trngen link\n// spec sha 0123\n")
    assert "module link_port(" in text.replace(" (", "(")
    assert str(tmp_path) not in text and not re.search(r"/(home|work|tmp)/", text)
    mtime = files[0].stat().st_mtime_ns
    emit(params, tmp_path / "a", "trngen link\nspec sha 0123")
    assert files[0].stat().st_mtime_ns == mtime  # unchanged content is not rewritten


@pytest.mark.parametrize("params", PARAMS, ids=["one", "odd"])
def test_verilator_lint_is_clean_with_the_waivers(params, tmp_path):
    env = setup_verilator_env({"PATH": shutil.os.environ.get("PATH", "")})
    exe = shutil.which("verilator", path=env["PATH"])
    if exe is None:
        pytest.skip("verilator is not installed")
    v, vlt = emit(params, tmp_path, "lint")
    res = subprocess.run([exe, "--lint-only", "-Wall", str(vlt), str(v)], env=env,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "%Warning" not in res.stderr
    # Without the waivers the same rules, and only those, fire.
    res = subprocess.run([exe, "--lint-only", "-Wall", "-Wno-fatal", str(v)], env=env,
                         capture_output=True, text=True)
    fired = set(re.findall(r"%Warning-([A-Z]+)", res.stderr))
    assert fired <= set(LINT_WAIVERS), fired - set(LINT_WAIVERS)


def test_emit_rejects_other_parameters(tmp_path):
    with pytest.raises(TypeError, match="params must be a LinkParams"):
        emit({"width": 64}, tmp_path, "")
