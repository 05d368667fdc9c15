"""Kernel times from the core simulator's timing-only mode, kept in memory and in the
machine's store.

The one source of a kernel's time in a training step is :func:`kernels.run` with
``timing_only``: nothing here estimates a time. A time is keyed by the core's parameters (the
spec as the simulator sees it), the digest of every file the kernel library can reach through
its imports (the kernels, the core simulator with its cost rules, the golden models, the
parameter objects: :func:`specs.store.code_digest`), the kernel, its shape and its format; a
change to any of them is a new key, so a stale time is never reused. Each time is an entry of
the store's ``kernel-times`` kind (:class:`specs.store.Store`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from hdl.core.params import CoreParams
from specs.store import Store, code_digest

__all__ = ["KernelTimes"]

#: The modules whose code decides a kernel's time: the kernel library, and through its
#: imports everything it runs.
TIMED_BY = ("kernels",)


class KernelTimes:
    """Seconds of one kernel run on one physical core of ``params``.

    ``directory`` is the root of the store the times are kept in (default: the machine's,
    :func:`specs.store.cache_home`); ``None`` keeps them in memory only. :attr:`computed`
    counts the simulator runs this object made.
    """

    def __init__(self, params: CoreParams, directory: Path | None | str = "default"):
        self.params = params
        self.key = hashlib.sha256("\0".join(
            ["trngen kernel times 2", repr(params), code_digest(*TIMED_BY)]).encode()
        ).hexdigest()
        self.store = (None if directory is None
                      else Store("kernel-times", None if directory == "default" else directory))
        self._times: dict[str, float] = {}
        self.computed = 0

    def entry(self, kernel: str, shape: dict[str, int], dtype: str) -> str:
        """The store key of one kernel time."""
        name = f"{kernel}:{dtype}:" + ",".join(f"{k}={v}" for k, v in shape.items())
        return hashlib.sha256(f"{self.key}\0{name}".encode()).hexdigest()

    def __call__(self, kernel: str, shape: dict[str, int], dtype: str) -> float:
        key = self.entry(kernel, shape, dtype)
        t = self._times.get(key)
        if t is None and self.store is not None:
            found = self.store.get_json(key)
            if isinstance(found, int | float):
                t = self._times[key] = float(found)
        if t is None:
            import kernels  # noqa: PLC0415  the kernel library, needed only on a miss

            run = kernels.run(self.params, kernels.KERNELS[kernel], dict(shape), dtype,
                              timing_only=True)
            t = self._times[key] = float(run.result.time)
            self.computed += 1
            if self.store is not None:
                self.store.put_json(key, t)
        return t
