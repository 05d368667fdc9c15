"""Races: two streams touching the same bytes, one of them writing, with no semaphore
ordering them (:class:`Races`, by vector clocks), each reported as a
:class:`~sim.core.rules.ProgramError` naming both instructions."""

from __future__ import annotations

from bisect import insort
from dataclasses import replace

from hdl.core import isa
from hdl.core.isa import AP, Instruction

from .rules import extent, fail

__all__ = ["RUNS", "Races", "footprint", "footprints", "overlap"]


#: The most runs a row of an HBM access is told apart into (:func:`footprints`); past it the
#: row's whole span stands for them.
RUNS = 16


def footprint(ap: AP) -> tuple:
    """Bytes ``ap`` may touch: on chip (space, first partition, end partition, first byte,
    end byte); in HBM ("hbm", address of row 0, row stride, rows, first byte, end byte of a
    row)."""
    lo, hi = extent(ap.dims)
    lo, hi = lo * ap.itemsize, (hi + 1) * ap.itemsize
    if ap.space == "hbm":
        return ("hbm", ap.offset, ap.pstride, ap.partitions, lo, hi)
    return (ap.space, ap.partition, ap.partition + ap.partitions, ap.offset + lo,
            ap.offset + hi)


def footprints(ap: AP) -> list[tuple]:
    """:func:`footprint` of ``ap``, an HBM access of at most :data:`RUNS` runs a row (its
    last axis at each index of the others) as one footprint a run: rows of interleaved
    accesses (a token-major tensor's columns of one head group and of the next) then meet
    only where they share a byte."""
    outer, last = ap.dims[:-1], ap.dims[-1:]
    runs = 1
    for n, _ in outer:
        runs *= n
    if ap.space != "hbm" or not outer or runs > RUNS:
        return [footprint(ap)]
    starts = [0]
    for n, stride in outer:
        starts = [o + i * stride for o in starts for i in range(n)]
    return [footprint(replace(ap, offset=ap.offset + o * ap.itemsize, dims=last))
            for o in starts]


def overlap(a: tuple, b: tuple) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] != "hbm":
        return a[1] < b[2] and b[1] < a[2] and a[3] < b[4] and b[3] < a[4]
    _, a0, pa, ra, alo, ahi = a
    _, b0, pb, rb, blo, bhi = b
    if a0 + alo >= b0 + (rb - 1) * pb + bhi or b0 + blo >= a0 + (ra - 1) * pa + ahi:
        return False
    for i in range(ra):  # rows of a against the rows of b that could meet them
        x0, x1 = a0 + i * pa + alo, a0 + i * pa + ahi
        if pb == 0:
            if b0 + blo < x1 and x0 < b0 + bhi:
                return True
            continue
        j_min = max(0, (x0 - b0 - bhi) // pb + 1)
        j_max = min(rb - 1, -((b0 + blo - x1) // pb) - 1)
        if j_min <= j_max:
            return True
    return False


class Races:
    """Happens-before by vector clocks: program order within a stream, and a semaphore wait
    after the increments it consumed. Each stream's clock counts its signals; an access by
    stream ``t`` at clock ``e`` is ordered before a later access by ``s`` when ``s`` has
    acquired more than ``e`` of ``t``'s signals."""

    def __init__(self, names: list[str], streams: dict):
        self.names, self.streams = names, streams
        n = len(names)
        self.vc = [[0] * n for _ in range(n)]
        self.sems: dict[int, list] = {}  # sem -> sorted [(visible, order, clock)]
        self.order = 0
        self.accesses: list[tuple] = []  # (footprint, write, stream, epoch, index)
        self.since_prune = 0

    def release(self, s: int, sem: int, visible: float, count: int) -> None:
        self.vc[s][s] += 1
        entry = (visible, self.order, tuple(self.vc[s]))
        self.order += 1
        lst = self.sems.setdefault(sem, [])
        for _ in range(count):
            insort(lst, entry)

    def acquire(self, s: int, sem: int, value: int) -> None:
        mine = self.vc[s]
        for _, _, clock in self.sems[sem][:value]:
            for j, c in enumerate(clock):
                if c > mine[j]:
                    mine[j] = c

    def access(self, s: int, index: int, ins: Instruction) -> None:
        mine = self.vc[s]
        new = [(fp, written) for _, ap, written in isa.reach(ins) for fp in footprints(ap)]
        for fp, write, t, epoch, other in self.accesses:
            if t == s or mine[t] > epoch:
                continue  # same stream, or ordered by semaphores
            for nfp, nwrite in new:
                if (write or nwrite) and overlap(fp, nfp):
                    self._fail(s, index, ins, t, other, nfp, nwrite)
        epoch = mine[s]
        self.accesses.extend((fp, w, s, epoch, index) for fp, w in new)
        self.since_prune += 1
        if self.since_prune >= 64:
            self.since_prune = 0
            n = len(self.names)
            floor = [min(self.vc[o][t] for o in range(n) if o != t) if n > 1 else 1 << 60
                     for t in range(n)]
            self.accesses = [a for a in self.accesses if floor[a[2]] <= a[3]]

    def _fail(self, s, index, ins, t, other, nfp, nwrite) -> None:
        theirs = self.streams[self.names[t]][other]
        what = "writes" if nwrite else "reads"
        fail(self.names[s], index, ins, "race",
             f"it {what} {nfp[0].upper()} bytes that {self.names[t]}[{other}] "
             f"`{isa.format_instruction(theirs)}` also accesses, one of them writing, and "
             f"no semaphore orders the two")
