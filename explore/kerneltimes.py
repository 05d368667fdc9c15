"""Kernel times from the core simulator's timing-only mode, cached in memory and on disk.

The one source of a kernel's time in a training step is :func:`kernels.run` with
``timing_only``: nothing here estimates a time. A time is keyed by the core's parameters
(the spec as the simulator sees it), the sources of the kernels and of the simulator with its
cost rules, the kernel, its shape and its format; a change to any of them is a new key, so a
stale time is never reused. The disk cache is one JSON file per key prefix under
``build/kernel-times/``, written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from hdl.core.params import CoreParams

__all__ = ["KernelTimes"]

_ROOT = Path(__file__).resolve().parent.parent
#: The sources a kernel's time depends on besides the spec.
_SOURCES = ("kernels", "sim/core", "sim/golden/systolic.py", "hdl/core/isa.py")


def _code_digest() -> str:
    h = hashlib.sha256()
    for name in _SOURCES:
        p = _ROOT / name
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            h.update(f.relative_to(_ROOT).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


class KernelTimes:
    """Seconds of one kernel run on one physical core of ``params``.

    ``directory`` (default ``build/kernel-times``) holds the disk cache; ``None`` keeps the
    cache in memory only. :attr:`computed` counts the simulator runs this object made.
    """

    def __init__(self, params: CoreParams, directory: Path | None | str = "default"):
        self.params = params
        key = hashlib.sha256(repr(params).encode() + _code_digest().encode()).hexdigest()[:20]
        self.key = key
        if directory == "default":
            directory = Path("build") / "kernel-times"
        self.file = Path(directory) / f"{params.name}-{key}.json" if directory else None
        self._times: dict[str, float] = {}
        if self.file is not None and self.file.is_file():
            try:
                self._times = json.loads(self.file.read_text())
            except (OSError, ValueError):
                self._times = {}
        self._dirty = False
        self.computed = 0

    @staticmethod
    def _name(kernel: str, shape: dict[str, int], dtype: str) -> str:
        return f"{kernel}:{dtype}:" + ",".join(f"{k}={v}" for k, v in shape.items())

    def __call__(self, kernel: str, shape: dict[str, int], dtype: str) -> float:
        name = self._name(kernel, shape, dtype)
        t = self._times.get(name)
        if t is None:
            import kernels  # noqa: PLC0415  the kernel library, needed only on a miss

            run = kernels.run(self.params, kernels.KERNELS[kernel], dict(shape), dtype,
                              timing_only=True)
            t = self._times[name] = float(run.result.time)
            self.computed += 1
            self._dirty = True
        return t

    def save(self) -> None:
        """Write the new times to disk (atomically); nothing when nothing is new."""
        if self.file is None or not self._dirty:
            return
        self.file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self._times, indent=0, sort_keys=True))
        tmp.replace(self.file)
        self._dirty = False
