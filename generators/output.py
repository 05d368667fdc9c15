"""Writing generated artefacts: deterministic, atomic, and only when their content changes.

Everything for one output directory is written into a temporary sibling first; only when all
of it was produced is the directory swapped into place. A failure leaves no directory and no
half-written file behind. When the new manifest equals the one on disk, nothing is touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from . import __version__


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Staging:
    """A temporary directory that becomes ``target`` on :meth:`commit`."""

    def __init__(self, target: Path):
        self.target = Path(target)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.", dir=self.target.parent))

    def path(self, relative: str) -> Path:
        p = self.root / relative
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_text(self, relative: str, text: str) -> Path:
        p = self.path(relative)
        p.write_text(text, encoding="utf-8", newline="\n")
        return p

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
        old_manifest = self.target / "manifest.json"
        new_manifest = self.root / "manifest.json"
        if old_manifest.is_file() and old_manifest.read_bytes() == new_manifest.read_bytes():
            self.discard()
            return False
        if self.target.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.old.",
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
