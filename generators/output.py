"""Writing generated artefacts: deterministic, atomic, and only when their content changes.

Everything for one output directory is written into a temporary sibling first; only when all
of it was produced is the directory swapped into place. A failure leaves no directory and no
half-written file behind. When the new manifest equals the one on disk, nothing is touched.

Runs into the same directory at once take turns at the swap (a lock file beside it), so the
last one to finish leaves one complete build. A run killed at any moment leaves the previous
build or none: what it left beside the target (its staging directory, or the previous build
moved aside in the middle of a swap) is cleaned up, or put back, by the next run's swap.
:func:`write_if_changed` is the one helper that writes a single generated file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from specs.files import locked, pid_alive

from . import __version__


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_if_changed(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (UTF-8, ``\\n`` line ends) unless it already holds exactly
    that; return ``path``."""
    path = Path(path)
    data = text.encode("utf-8")
    if not path.is_file() or path.read_bytes() != data:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return path


def verilator_waivers(waivers: dict[str, str], header: str = "") -> str:
    """The text of a Verilator configuration file (``.vlt``) that waives each lint rule of
    ``waivers`` (rule: reason), its reason as a comment above it; ``header`` leads, as
    comments."""
    prefix = "".join(f"// {line}".rstrip() + "\n" for line in header.splitlines())
    rules = "".join(f"// {rule}: {why}\nlint_off -rule {rule}\n" for rule, why in waivers.items())
    return f"{prefix}`verilator_config\n{rules}"


class Staging:
    """A temporary directory that becomes ``target`` on :meth:`commit`."""

    def __init__(self, target: Path):
        self.target = Path(target)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix=self._prefix("stage", os.getpid()),
                                          dir=self.target.parent))

    def _prefix(self, kind: str, pid: int) -> str:
        return f".{self.target.name}.{kind}.{pid}."

    def _recover(self) -> None:
        """Under the lock: put back a previous build that a killed run had moved aside, and
        remove what killed runs left (staging and trash directories of dead processes)."""
        for kind in ("old", "stage"):
            prefix = f".{self.target.name}.{kind}."
            for p in sorted(self.target.parent.glob(prefix + "*")):
                pid = p.name.removeprefix(prefix).partition(".")[0]
                if p == self.root or not pid.isdigit() or pid_alive(int(pid)):
                    continue
                if kind == "old" and not self.target.exists() and (p / "old").is_dir():
                    os.replace(p / "old", self.target)
                shutil.rmtree(p, ignore_errors=True)

    def path(self, relative: str) -> Path:
        p = self.root / relative
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_text(self, relative: str, text: str) -> Path:
        return write_if_changed(self.path(relative), text)

    def manifest(self, spec_name: str, spec_digest: str, extra: dict | None = None) -> dict:
        files = sorted(p for p in self.root.rglob("*") if p.is_file())
        data = {
            "tool": "trngen",
            "version": __version__,
            "spec": spec_name,
            "spec_sha256": spec_digest,
            **(extra or {}),
            "files": [{"path": p.relative_to(self.root).as_posix(), "sha256": sha256(p),
                       "bytes": p.stat().st_size} for p in files],
        }
        self.write_text("manifest.json", json.dumps(data, indent=2, sort_keys=False) + "\n")
        return data

    def commit(self) -> bool:
        """Move the staged tree into place; False when the target already had this content."""
        with locked(self.target.parent / f".{self.target.name}.lock"):
            self._recover()
            old_manifest = self.target / "manifest.json"
            new_manifest = self.root / "manifest.json"
            if old_manifest.is_file() and old_manifest.read_bytes() == new_manifest.read_bytes():
                self.discard()
                return False
            if self.target.exists():
                trash = Path(tempfile.mkdtemp(prefix=self._prefix("old", os.getpid()),
                                              dir=self.target.parent))
                os.replace(self.target, trash / "old")
                os.replace(self.root, self.target)
                shutil.rmtree(trash, ignore_errors=True)
            else:
                os.replace(self.root, self.target)
        return True

    def discard(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.discard()
