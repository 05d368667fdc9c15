"""The machine's one store (specs/store.py) and the code digest its keys are made from."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from explore.kerneltimes import KernelTimes
from hdl.params import core_params
from specs import store as store_module
from specs.loader import load
from specs.store import KEEP_DAYS, Store, cache_home, code_digest, code_files


def test_an_entry_reads_back_whole_and_a_damaged_one_is_absent(tmp_path):
    s = Store("things", tmp_path)
    exe = tmp_path / "tool"
    exe.write_bytes(b"#!/bin/sh\n")
    exe.chmod(0o755)
    assert s.get("k1") is None
    assert s.put("k1", {"a.txt": "alpha", "sub/b.bin": b"\x00\x01", "tool": exe})
    assert s.get("k1") == {"a.txt": b"alpha", "sub/b.bin": b"\x00\x01", "tool": b"#!/bin/sh\n"}
    out = s.fetch("k1", tmp_path / "out")
    assert [p.relative_to(tmp_path / "out").as_posix() for p in out] == [
        "a.txt", "sub/b.bin", "tool"]
    assert os.access(tmp_path / "out" / "tool", os.X_OK)
    assert not os.access(tmp_path / "out" / "a.txt", os.X_OK)
    # the first publication stays; a second of the same key is not published
    assert not s.put("k1", {"a.txt": "other"})
    assert s.get("k1")["a.txt"] == b"alpha"
    (s.entry("k1") / "files" / "a.txt").write_text("alphx")          # damaged
    assert s.get("k1") is None and s.fetch("k1", tmp_path / "none") is None
    assert not (tmp_path / "none").exists()
    assert s.put("k1", {"a.txt": "alpha"})                            # mended
    assert s.get("k1") == {"a.txt": b"alpha"}
    assert s.put("k1", {"a.txt": "beta"}, replace=True)
    assert s.get_json("k1") is None and s.get("k1") == {"a.txt": b"beta"}
    assert s.put_json("j", {"x": [1, 2.5]}) and s.get_json("j") == {"x": [1, 2.5]}
    assert not [p for p in s.path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("key", ["", "../up", "a/b", ".hidden"])
def test_a_key_is_a_plain_name(tmp_path, key):
    with pytest.raises(ValueError, match="plain name"):
        Store("things", tmp_path).put(key, {"a": "b"})


def test_stale_entries_and_dead_writers_leftovers_are_removed(tmp_path, monkeypatch):
    s = Store("things", tmp_path)
    s.put("old", {"a": "1"})
    s.put("fresh", {"a": "2"})
    past = time.time() - (KEEP_DAYS + 1) * 86400
    os.utime(s.entry("old") / "index.json", (past, past))
    dead = s.path / ".half.999999999.x1"   # a writer's directory, its process gone
    dead.mkdir()
    mine = s.path / f".mine.{os.getpid()}.x2"
    mine.mkdir()
    monkeypatch.setattr(Store, "_pruned", set())
    s.put("new", {"a": "3"})
    assert s.get("old") is None and not s.entry("old").exists()
    assert s.get("fresh") is not None and not dead.exists() and mine.exists()


def test_the_store_lives_in_the_machine_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TRNGEN_CACHE", str(tmp_path / "c"))
    assert Store("sim").path == tmp_path / "c" / "sim" == cache_home() / "sim"
    monkeypatch.delenv("TRNGEN_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert Store("area").path == tmp_path / "x" / "trngen" / "area"
    times = KernelTimes(core_params(load("trn1")))
    assert times.store.path == tmp_path / "x" / "trngen" / "kernel-times"


def test_code_files_follow_the_imports():
    rel = {p.relative_to(store_module.ROOT).as_posix() for p in code_files("kernels")}
    # reached only through imports inside functions or several levels down
    assert {"kernels/__init__.py", "sim/core/machine.py", "hdl/core/isa.py",
            "hdl/tensor/params.py", "hdl/core/params.py", "sim/golden/numerics.py"} <= rel
    assert not any(r.startswith(("generators/", "tests/")) for r in rel)
    with pytest.raises(ValueError, match="not a module"):
        code_files("numpy")


@pytest.mark.parametrize("changed", ["hdl/tensor/params.py", "hdl/core/params.py",
                                     "sim/golden/numerics.py"])
def test_a_change_to_code_a_kernel_time_depends_on_recomputes_it(tmp_path, monkeypatch,
                                                                  changed):
    """A copy of the tree: changing any file the kernels reach is a new key for every
    kernel time, and the time is simulated again instead of read from the store."""
    tree = tmp_path / "tree"
    for package in store_module.PACKAGES:
        shutil.copytree(store_module.ROOT / package, tree / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(store_module, "ROOT", tree)
    code_files.cache_clear()
    code_digest.cache_clear()
    params = core_params(load("trn1"))
    shape = {"R": 128, "C": 128}
    first = KernelTimes(params, tmp_path / "store")
    t = first("residual_add", shape, "bf16")
    again = KernelTimes(params, tmp_path / "store")
    assert again("residual_add", shape, "bf16") == t and again.computed == 0
    path = tree / changed
    path.write_text(path.read_text() + "\n# a change\n")
    code_files.cache_clear()
    code_digest.cache_clear()
    after = KernelTimes(params, tmp_path / "store")
    assert after.key != first.key
    assert after("residual_add", shape, "bf16") == t and after.computed == 1
    code_files.cache_clear()
    code_digest.cache_clear()


def test_nothing_is_kept_in_the_checkout_or_beside_the_code(tmp_path, monkeypatch):
    monkeypatch.setenv("TRNGEN_CACHE", str(tmp_path / "cache"))
    from hdl import area

    for kind in (area.results(), Store("chip"), KernelTimes(core_params(load("trn1"))).store):
        assert Path(kind.path).is_relative_to(tmp_path / "cache")
