"""The discrete-event engine the simulators share: an agenda of timed wake-ups and resources
served in order.

The NeuronCore simulator (:meth:`sim.core.machine.Core.run`, whose processes are the engine
streams and DMA queues) and the multi-chip execution model (:mod:`sim.system.execute`, whose
processes are chunk hops and reductions) both run on it:

- :class:`Agenda`: each process's next wake-up, earliest first, ties broken by the lower
  process number. Waking a process again supersedes its earlier wake-up (each process counts
  its wake-ups; a popped entry that is not the latest is dropped).
- :class:`Resources`: a resource serves one use at a time, in the order the uses arrive
  (first come, first served): a use that arrives while its resource is busy starts when the
  resource frees. Each resource's busy time is summed.
"""

from __future__ import annotations

from heapq import heappop, heappush

__all__ = ["Agenda", "Resources"]


class Agenda:
    """The pending wake-ups of processes ``0 .. processes-1``."""

    __slots__ = ("_gen", "heap")

    def __init__(self, processes: int):
        #: (time, process, wake-up count) entries; ``heap[0][0]`` is the earliest time any
        #: entry holds, superseded ones included.
        self.heap: list[tuple[float, int, int]] = []
        self._gen = [0] * processes

    def wake(self, time: float, process: int) -> None:
        """Wake ``process`` at ``time``, superseding any wake-up it has pending."""
        gen = self._gen
        g = gen[process] = gen[process] + 1
        heappush(self.heap, (time, process, g))

    def pop(self) -> tuple[float, int, int] | None:
        """The earliest pending wake-up (time, process, count), removed; None when none is
        left."""
        heap, gen = self.heap, self._gen
        while heap:
            entry = heappop(heap)
            if entry[2] == gen[entry[1]]:
                return entry
        return None


class Resources:
    """Resources (any hashable names) served first come, first served."""

    __slots__ = ("busy", "free")

    def __init__(self):
        self.free: dict = {}  # resource -> time its last use ends
        self.busy: dict = {}  # resource -> summed duration of its uses

    def serve(self, resource, ready: float, duration: float) -> float:
        """Start of a use of ``resource`` for ``duration`` that arrives at ``ready``."""
        free = self.free.get(resource, 0.0)
        start = ready if ready > free else free
        self.free[resource] = start + duration
        self.busy[resource] = self.busy.get(resource, 0.0) + duration
        return start

    def serve_all(self, resources, ready: float, duration: float) -> float:
        """Start of a use that holds every one of ``resources`` at once for ``duration``:
        when the last of them frees."""
        free, busy = self.free, self.busy
        start = ready
        for r in resources:
            f = free.get(r, 0.0)
            if f > start:
                start = f
        end = start + duration
        for r in resources:
            free[r] = end
            busy[r] = busy.get(r, 0.0) + duration
        return start
