"""The vector/activation generator: deterministic files, lanes emitted once, lint clean under
``-Wall`` with the waiver file each engine's generator writes."""

import os
import re
import shutil
import subprocess

import pytest

from generators.vector import LINT_WAIVERS, emit, sharing
from hdl.vector.activation import ActivationParams
from hdl.vector.convert import ENGINE_FORMATS
from hdl.vector.functions import FunctionSpec
from hdl.vector.vector import VectorParams
from sim.tb.runner import setup_verilator_env

FUNCTIONS = (
    FunctionSpec("relu", mode="exact"),
    FunctionSpec("tanh", lo=-4.0, hi=4.0, segments=8, degree=2, post_mul_x=True,
                 below="minus_one", above="one"),
    FunctionSpec("sqrt", mode="log", lo=1.0, hi=4.0, segments=2, degree=2),
    FunctionSpec("sigmoid", lo=-8.0, hi=8.0, segments=4, degree=2, below="exp", above="one"),
    FunctionSpec("sin", lo=0.0, hi=0.5, segments=1, degree=2),
    FunctionSpec("arctan", lo=0.0, hi=1.0, segments=1, degree=2),
)
PARAMS = [VectorParams(lanes=3, rng="lfsr32", seed=5),
          ActivationParams(lanes=2, functions=FUNCTIONS)]



@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    out = tmp_path_factory.mktemp("rtl")
    return out, emit(PARAMS, out, "trngen vector test\nspec hash 0123")


def test_emit_writes_top_and_lane_modules(emitted):
    out, paths = emitted
    formats = "_".join(ENGINE_FORMATS)
    assert [p.name for p in paths] == ["vector.v", "vector_lane.v",
                                       "numerics_add32.v", "numerics_mul32.v",
                                       f"output_cast_{formats}_lfsr32.v", "vector.vlt",
                                       "activation.v", "activation_lane.v",
                                       "numerics_add32.v", "numerics_mul32.v",
                                       f"output_cast_{formats}_xorwow.v", "activation.vlt"]
    for path in paths:
        text = path.read_text()
        assert text.startswith("// trngen vector test\n// spec hash 0123\n")
        assert str(out) not in text
    top = (out / "vector.v").read_text()
    assert top.count("vector_lane lane") == 3 and "module vector_lane" not in top
    # the lane's output cast: a module of its own, named after its formats and generator,
    # instantiated by the one lane module, each lane tied to its lane's seed words
    lane = (out / "vector_lane.v").read_text()
    cast = f"output_cast_{formats}_lfsr32"
    assert "module vector_lane(" in lane and "seed" in lane
    assert lane.count(f"{cast} cast") == 1 and f"module {cast}" not in lane
    assert "lfsr" in (out / f"{cast}.v").read_text()
    # the lanes' fp32 adders and multipliers: one module each, instantiated by both lanes
    # (the vector lane's element adder and multiplier, those of its second operation and its
    # reduction's adder)
    assert sorted(re.findall(r"numerics_(add|mul)32 (\w+) ", lane)) == [
        ("add", "add"), ("add", "add1"), ("add", "red"), ("mul", "mul"), ("mul", "mul1")]
    lane = (out / "activation_lane.v").read_text()
    assert lane.count("numerics_mul32 mul_") >= 5 and lane.count("numerics_add32 add_") >= 5
    for text in (lane, (out / "vector_lane.v").read_text()):
        assert "module numerics_mul32" not in text and "module numerics_add32" not in text
    assert lane.count(f"output_cast_{formats}_xorwow cast") == 1


def test_shared_modules_are_elaborated_once_and_each_engine_gets_its_own(emitted, tmp_path):
    """Emission is deterministic and, within `gen chip`'s sharing, the lanes' shared modules
    are kept by name and the next emission reads them: the files are byte for byte those an
    emission writes alone (into another folder), the vector and activation engines' unequal
    casts (lfsr32 against xorwow) each their own. Emitted again into the same folder, a file
    whose text is unchanged is not rewritten."""
    out, paths = emitted
    formats = "_".join(ENGINE_FORMATS)
    kept = tmp_path / "kept"
    kept.mkdir()
    with sharing(kept):
        first = emit(PARAMS, tmp_path / "first", "trngen vector test\nspec hash 0123")
        texts = [p.read_text() for p in first]
        mtimes = [p.stat().st_mtime_ns for p in first]
        assert sorted(p.name for p in kept.glob("*.v")) == sorted(
            ["numerics_add32.v", "numerics_mul32.v", f"output_cast_{formats}_lfsr32.v",
             f"output_cast_{formats}_xorwow.v"])
        # what is kept is taken as it is (here marked), not elaborated again
        add = kept / "numerics_add32.v"
        add.write_text(add.read_text() + "// kept\n")
        again = emit(PARAMS, tmp_path / "first", "trngen vector test\nspec hash 0123")
    for a, b, text, mtime, c in zip(paths, first, texts, mtimes, again, strict=True):
        assert a.name == b.name == c.name
        assert a.read_text() == text and str(tmp_path) not in text
        marked = text + "// kept\n" if a.name == add.name else text
        assert c.read_text() == marked
        assert (c.stat().st_mtime_ns == mtime) == (a.name != add.name)


def test_emit_rejects_other_params(tmp_path):
    with pytest.raises(ValueError, match=r"params must be VectorParams or ActivationParams"):
        emit([object()], tmp_path, "")


@pytest.mark.parametrize("top", ["vector", "activation"])
def test_emitted_verilog_is_lint_clean(emitted, top):
    out, paths = emitted
    names = [p.name for p in paths]  # the engine's files, from its top to its .vlt
    files = names[names.index(f"{top}.v"):names.index(f"{top}.vlt") + 1]
    env = setup_verilator_env(dict(os.environ))
    verilator = shutil.which("verilator", path=env.get("PATH"))
    if verilator is None:
        pytest.skip("verilator is not installed")
    assert (out / f"{top}.vlt").read_text().count("lint_off -rule") == len(LINT_WAIVERS[top])
    cmd = [verilator, "--lint-only", "-Wall", "--top-module", top, *files]
    proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
