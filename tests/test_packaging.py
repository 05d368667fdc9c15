"""The package as a user installs it: the wheel, without extras, in a clean virtual environment.

The wheel is built from the repository by the build backend of the running environment (the
lock's), installed into a fresh venv (no system site packages) with its dependencies at the
releases and hashes of ``requirements.lock`` (pip's own cache and configured indexes serve
them), and ``gen check`` and
``gen chip`` run from a directory outside the repository. ``gen chip`` runs on a small chip
derived from trn2 (one tensor format, two activation functions) so that the test spends its
time on installing, not on elaborating arrays; it still reads every packaged data file
(specs, sources, units, templates) and fits activation ROMs with scipy.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SMALL = """extends: trn2
chip:
  name: small
  title: Small
  core:
    tensor: {formats: [bf16], rates: null, cfp8: null, sparsity: null}
    scalar: {functions: [relu, exp]}
"""


def _run(*args, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    # nothing of the calling environment leaks in: with the repository on PYTHONPATH, pip
    # would find trngen (its egg-info) already there and install nothing
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    proc = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == 0, f"{' '.join(map(str, args))}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture
def own_tmp():
    """A directory of the test's own: the run takes minutes, and pytest sessions running
    beside it prune each other's old base temporary directories."""
    with tempfile.TemporaryDirectory(prefix="trngen-wheel-") as d:
        yield Path(d)


@pytest.mark.slow
def test_wheel_without_extras_runs_gen_from_outside_the_repo(own_tmp):
    tmp_path = own_tmp
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", tmp_path / "dist", REPO, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("trngen-*.whl")
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python, gen = venv / "bin" / "python", venv / "bin" / "gen"
    # this pip installs into the venv (--python): the venv needs no pip of its own; modules
    # are compiled when first imported, not all at install (a fifth of the install's time).
    # The lock's hashes make pip require one for every file, the wheel's too.
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (tmp_path / "wheel.txt").write_text(f"{wheel} --hash=sha256:{digest}\n")
    _run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-compile",
         "-c", REPO / "requirements.lock", "-r", tmp_path / "wheel.txt", cwd=tmp_path)
    # the core dependencies only: scipy is one, the exploration extra is not installed
    probe = _run(python, "-c", "import importlib.util as u; "
                 "print([m for m in ('scipy', 'pandas', 'dask') if u.find_spec(m)])",
                 cwd=tmp_path)
    assert probe.stdout.strip() == "['scipy']"
    work = tmp_path / "work"
    work.mkdir()
    (work / "small.yaml").write_text(SMALL)
    check = _run(gen, "check", "trn2", "--format", "json", cwd=work)
    assert json.loads(check.stdout)
    _run(gen, "chip", "small.yaml", "-o", "out", cwd=work)
    manifest = json.loads((work / "out" / "manifest.json").read_text())
    paths = {f["path"] for f in manifest["files"]}
    assert {"datasheet.md", "datasheet.html", "rtl/files.f"} <= paths
    assert "rtl/tensor_pe.v" in paths, sorted(paths)
