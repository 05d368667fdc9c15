"""gen chip's output under faults: killed runs, runs at once, stale leftovers.

A build is complete when its manifest lists exactly the files present, each with its hash.
The runs here emit the link unit and the datasheets of two link variants (trn2, and trn2
with another receive buffer), so that two builds differ and each takes seconds, not minutes.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from generators.chip import generate_chip
from generators.output import Staging, write_if_changed
from specs.loader import load_document

REPO = Path(__file__).resolve().parents[1]
UNITS = "link,formats"
#: Runs builds of the two variants into argv[1], alternately, forever (until killed);
#: prints a line once the first build is in place.
LOOP = """
import sys
from pathlib import Path
from generators.chip import generate_chip
from specs.loader import load_document
docs = [load_document(a) for a in sys.argv[2:]]
out = Path(sys.argv[1])
n = 0
while True:
    generate_chip(docs[n % len(docs)], out, "sim", units=UNITS)
    if n == 0:
        print("built", flush=True)
    n += 1
    if len(docs) == 1:
        break
""".replace("UNITS", repr(UNITS.split(",")))


def _variants(tmp_path: Path) -> list[str]:
    other = tmp_path / "other.yaml"
    other.write_text("extends: trn2\nchip:\n  name: other\n  title: Other\n"
                     "  sim: {link_credits: 24}\n")
    return ["trn2", str(other)]


def complete(out: Path) -> str:
    """The spec name of the complete build in ``out``; AssertionError if it is not one."""
    manifest = json.loads((out / "manifest.json").read_text())
    listed = {f["path"]: f["sha256"] for f in manifest["files"]}
    present = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert present == set(listed) | {"manifest.json"}, present ^ (set(listed) | {"manifest.json"})
    for path, digest in listed.items():
        assert hashlib.sha256((out / path).read_bytes()).hexdigest() == digest, path
    return manifest["spec"]


def _python(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-c", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.slow
def test_sigkill_leaves_the_previous_build_or_none(tmp_path, seed):
    rng = random.Random(seed)
    out = tmp_path / "build"
    names = _variants(tmp_path)
    proc = _python(LOOP, str(out), *names)
    assert proc.stdout.readline() == "built\n", proc.stderr.read()
    time.sleep(rng.uniform(0.0, 3.0))          # somewhere in a later build or swap
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists() or complete(out) in ("trn2", "other")
    generate_chip(load_document(names[1]), out, "sim", units=UNITS.split(","))
    assert complete(out) == "other"
    # what the killed runs left beside the build is gone
    assert sorted(p.name for p in tmp_path.iterdir()) == [".build.lock", "build", "other.yaml"]


@pytest.mark.slow
def test_runs_at_once_leave_one_complete_build(tmp_path):
    out = tmp_path / "build"
    names = _variants(tmp_path)
    procs = [_python(LOOP, str(out), name) for name in names]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0 and "Traceback" not in err, err
    assert complete(out) in ("trn2", "other")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".build.lock", "build", "other.yaml"]


def test_leftovers_of_dead_runs_are_cleaned_and_a_moved_build_put_back(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    target = tmp_path / "build"
    # a run killed in the middle of its swap: the previous build moved aside, none in place
    old = tmp_path / f".build.old.{dead}.abc" / "old"
    old.mkdir(parents=True)
    (old / "manifest.json").write_text('{"files": []}\n')
    stale = tmp_path / f".build.stage.{dead}.xyz"
    stale.mkdir()
    (stale / "half.v").write_text("module half(")
    live = tmp_path / f".build.stage.{os.getpid()}.live"    # a run still at work: kept
    live.mkdir()
    with Staging(target) as stage:
        stage.write_text("manifest.json", '{"files": []}\n')
        assert stage.commit() is False          # the put-back build has this content
    assert (target / "manifest.json").read_text() == '{"files": []}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".build.lock", f".build.stage.{os.getpid()}.live", "build"]


def test_write_if_changed_leaves_equal_files_alone(tmp_path):
    path = write_if_changed(tmp_path / "a" / "x.v", "module x;\nendmodule\n")
    stamp = path.stat().st_mtime_ns
    time.sleep(0.01)
    assert write_if_changed(path, "module x;\nendmodule\n") == path
    assert path.stat().st_mtime_ns == stamp
    write_if_changed(path, "module y;\nendmodule\n")
    assert path.read_bytes() == b"module y;\nendmodule\n"



def test_a_unit_emitted_by_a_worker_process_gives_the_same_files(tmp_path, monkeypatch):
    """`gen chip` emits its units in worker processes (one per core); the files are the same
    as emitted in this process."""
    from generators import chip
    from generators.chip import _emit, header
    from generators.units import UNITS
    from generators.workers import emitters

    monkeypatch.setattr(chip, "emission_key", lambda *args: None)  # both emitted, not stored
    doc = load_document("trn2")
    (params,) = UNITS["link"].params(doc.spec, "sim")
    threshold = gc.get_threshold()
    here = _emit("link", params, tmp_path / "here", header(doc))
    assert gc.get_threshold() == threshold       # the collector's thresholds are restored
    with emitters(2) as submit:
        there = submit(_emit, "link", params, tmp_path / "there", header(doc)).result()
    assert [p.name for p in here] == [p.name for p in there] and here
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(here, there, strict=True))
    with pytest.raises(ValueError, match=r"jobs must be a positive integer, not 0"):
        generate_chip(doc, tmp_path / "none", "sim", units=["link"], jobs=0)


def test_a_stored_emission_is_the_emitted_files_and_a_damaged_one_is_emitted_again(
        tmp_path, monkeypatch):
    """A unit's files come from the machine's store of emissions when it holds them for the
    same unit, parameters, header and code; an entry that is not intact is not used."""
    import dataclasses

    import generators.link
    from generators import chip
    from generators.units import UNITS

    monkeypatch.setenv("TRNGEN_CACHE", str(tmp_path / "cache"))
    doc = load_document("trn2")
    (params,) = UNITS["link"].params(doc.spec, "sim")
    head = chip.header(doc)
    emitted = chip._emit("link", params, tmp_path / "a", head)
    texts = [p.read_bytes() for p in emitted]
    entry = chip.emission_store().entry(chip.emission_key("link", params, head))
    assert (entry / "index.json").is_file()

    def not_emitted(*args):
        raise AssertionError("emitted where the store holds the files")

    with monkeypatch.context() as m:
        m.setattr(generators.link, "emit", not_emitted)
        fetched = chip._emit("link", params, tmp_path / "b", head)
    assert [p.name for p in fetched] == [p.name for p in emitted]
    assert [p.read_bytes() for p in fetched] == texts
    assert [p.parent for p in fetched] == [tmp_path / "b"] * len(texts)

    stored = entry / "files" / emitted[0].name
    stored.write_bytes(stored.read_bytes()[:-10])             # a damaged entry
    again = chip._emit("link", params, tmp_path / "c", head)
    assert [p.read_bytes() for p in again] == texts
    assert stored.read_bytes() == texts[0]                     # and stored whole again

    # Other parameters or another header are another entry; a test's stand-in is never stored.
    other = dataclasses.replace(params, credits=params.credits + 1)
    keys = {chip.emission_key("link", p, h) for p, h in
            [(params, head), (other, head), (params, head + " ")]}
    assert len(keys) == 3
    monkeypatch.setitem(UNITS, "link", dataclasses.replace(UNITS["link"], emit=not_emitted))
    assert chip.emission_key("link", params, head) is None
