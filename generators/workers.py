"""The worker processes `gen chip` emits its units in, and the collector's setting while it
elaborates."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager

__all__ = ["GC_THRESHOLD", "cores", "emitters", "fewer_collections", "loading_lock"]

#: Allocations between two young-generation collections while `gen chip` runs (Python's
#: default is 700).
GC_THRESHOLD = 10_000


@contextmanager
def fewer_collections(threshold: int = GC_THRESHOLD) -> Iterator[None]:
    """Run the body with the cyclic garbage collector's first threshold at ``threshold``.

    Elaboration builds netlists of hundreds of thousands of small objects that live until the
    module is written; at the default threshold the collector traverses them again and again.
    Collections still run, so peak memory stays about the same. The previous thresholds are
    restored on exit."""
    old = gc.get_threshold()
    gc.set_threshold(threshold, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def cores() -> int:
    """The processor cores this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


#: In a worker of :func:`emitters`, the lock its pool's workers take turns with to load
#: Yosys's WebAssembly; None in any other process.
_loading = None


def loading_lock():
    """In a worker of :func:`emitters`, the lock its pool's workers load Yosys's
    WebAssembly in turn with (such a worker runs Yosys in itself); None in any other
    process."""
    return _loading


def _die_with(parent: int, loading) -> None:
    """A worker's start: it keeps ``loading`` (:func:`loading_lock`), and on Linux it is
    killed when the parent process dies (even by SIGKILL), so that no worker writes into a
    build directory after its run was killed."""
    global _loading
    _loading = loading
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


@contextmanager
def emitters(jobs: int) -> Iterator:
    """A ``submit(function, *args) -> Future`` that runs each call in one of ``jobs`` worker
    processes (forked where the platform can, so that they start with the parent's imports),
    or at once in this process when ``jobs`` is 1."""
    if jobs <= 1:
        def submit(function, *args) -> Future:
            future: Future = Future()
            future.set_result(function(*args))
            return future
        yield submit
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_die_with,
                             initargs=(os.getpid(), context.Lock())) as pool:
        try:
            yield pool.submit
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
