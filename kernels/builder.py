"""A small builder for core programs: HBM tensors, SBUF/PSUM space, streams and events.

Kernels are written once against :class:`Builder` and are shape-generic. Synchronisation is
by events: :meth:`Builder.signal` adds one to the stream's own semaphore and returns the
:class:`Event` "that count reached", which :meth:`Builder.wait` turns into a wait on another
stream. Semaphores only count up, so an event stays true once reached.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hdl.core.isa import AP, DTYPES, Instruction, SemSignal, SemWait, TensorCopy, Transpose
from hdl.core.params import CoreParams
from sim.core.program import HbmTensor, Program

__all__ = ["DMA_BYTES", "SBUF_ALIGN", "Builder", "Event", "KernelError", "psum_columns",
           "sbuf_aligned"]

#: Alignment of a kernel's SBUF space, bytes per partition.
SBUF_ALIGN = 64
#: Bytes per partition a kernel gathers into one DMA where it can: the DMA guide's 2-4 KiB or
#: more, each transfer paying its own start-up in its in-order queue [DMA].
DMA_BYTES = 4096


def sbuf_aligned(nbytes: int) -> int:
    """The SBUF space per partition that ``nbytes`` take (:data:`SBUF_ALIGN`-byte aligned)."""
    return -(-nbytes // SBUF_ALIGN) * SBUF_ALIGN


def psum_columns(p) -> int:
    """The columns of a moving tile on a core of ``p`` whose fp32 results one PSUM bank holds:
    at most ``moving_max`` (512 on every chip at full scale)."""
    return min(p.moving_max, p.psum_bank_bytes // 4)


class KernelError(ValueError):
    """A kernel asked for something the core cannot give (a shape, a format, space)."""


@dataclass(frozen=True)
class Event:
    sem: int
    value: int


class Builder:
    """Builds one :class:`~sim.core.program.Program` for a core of ``params``."""

    def __init__(self, params: CoreParams):
        self.params = params
        self.program = Program()
        self._sems: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        self._sbuf = 0
        self._psum_banks = 0
        self._interned: dict[Instruction, Instruction] = {}

    # --- memory ---------------------------------------------------------------------------
    def hbm(self, name: str, shape, dtype: str) -> HbmTensor:
        return self.program.tensor(name, shape, dtype)

    def sbuf(self, nbytes: int, what: str) -> int:
        """``nbytes`` per partition of SBUF (:data:`SBUF_ALIGN`-byte aligned); the offset."""
        offset = self._sbuf
        self._sbuf += sbuf_aligned(nbytes)
        if self._sbuf > self.params.sbuf_bytes:
            raise KernelError(f"{what}: the kernel needs {self._sbuf} bytes of SBUF per "
                              f"partition, {self.params.name} has {self.params.sbuf_bytes}")
        return offset

    def psum_banks(self, count: int, what: str) -> list[int]:
        """``count`` whole PSUM banks; their byte offsets."""
        first = self._psum_banks
        self._psum_banks += count
        if self._psum_banks > self.params.psum_banks:
            raise KernelError(f"{what}: the kernel needs {self._psum_banks} PSUM banks, "
                              f"{self.params.name} has {self.params.psum_banks}")
        bank = self.params.psum_bank_bytes
        return [(first + i) * bank for i in range(count)]

    @staticmethod
    def tile(space: str, dtype: str, offset: int, partitions: int, dims,
             partition: int = 0, pstride: int = 0) -> AP:
        return AP(space, dtype, partition, partitions, offset, tuple(dims), pstride)

    def column(self, offset: int, partitions: int, partition: int = 0) -> AP:
        """One fp32 per partition in SBUF (a per-partition scalar)."""
        return AP("sbuf", "fp32", partition, partitions, offset, ((1, 1),))

    # --- streams and events ---------------------------------------------------------------
    def emit(self, stream: str, ins: Instruction) -> None:
        # equal instructions share one object, which the simulator checks and costs once
        ins = self._interned.setdefault(ins, ins)
        self.program.streams.setdefault(stream, []).append(ins)

    def signal(self, stream: str) -> Event:
        sem = self._sems.setdefault(stream, len(self._sems))
        self._counts[stream] = self._counts.get(stream, 0) + 1
        self.emit(stream, SemSignal(sem=sem, count=1))
        return Event(sem, self._counts[stream])

    def wait(self, stream: str, *events: Event | None) -> None:
        for ev in events:
            if ev is not None:
                self.emit(stream, SemWait(sem=ev.sem, value=ev.value))

    def transpose(self, pieces, bank: int, slot: int, *, arrived: Event | None = None,
                  free: Event | None = None, copied: Event | None = None,
                  engine: str = "vector"):
        """Each ``(src, dst)`` of ``pieces`` (SBUF tiles, ``src`` [P, F] and ``dst`` [F, P])
        turned by the tensor engine's transpose into PSUM ``bank``, ``slot`` bytes a piece and
        as many at once as the bank holds, each batch copied out to its ``dst`` by ``engine``
        (the vector or the scalar engine): pieces that lie side by side both in the bank and
        at their ``dst`` (one after another in the same partitions) in one copy, since each
        copy pays its access start. The tensor engine waits for ``arrived`` before the
        first batch and for the copies of the batch before (``copied`` before the first: the
        bank's last use); the copying engine for the batch's transposes and, before the
        first, ``free`` (the ``dst`` space's last use). Returns (the last batch's
        transposes, the last copies, each piece's copies)."""
        fit = max(1, self.params.psum_bank_bytes // slot)
        done, events = None, []
        for i in range(0, len(pieces), fit):
            batch = pieces[i:i + fit]
            turned = [AP("psum", src.dtype, 0, src.free, bank + j * slot,
                         ((src.partitions, 1),)) for j, (src, _) in enumerate(batch)]
            self.wait("tensor", arrived if i == 0 else None, copied)
            for (src, _), t in zip(batch, turned, strict=True):
                self.emit("tensor", Transpose(dst=t, src=src))
            done = self.signal("tensor")
            self.wait(engine, done, free if i == 0 else None)
            runs: list[list] = []  # [first PSUM tile, first dst, columns]
            for (_, dst), t in zip(batch, turned, strict=True):
                last = runs[-1] if runs else None
                if last and _follows(last[0], last[2], t) and _follows(last[1], last[2], dst):
                    last[2] += t.free
                else:
                    runs.append([t, dst, t.free])
            for t, dst, cols in runs:
                self.emit(engine, TensorCopy(dst=replace(dst, dims=((cols, 1),)),
                                             src=replace(t, dims=((cols, 1),))))
            copied = self.signal(engine)
            events += [copied] * len(batch)
        return done, copied, events

    def function(self, name: str) -> int:
        names = [f.name for f in self.params.functions]
        if name not in names:
            raise KernelError(f"function must be one of {', '.join(names)} on "
                              f"{self.params.name}, not {name!r}")
        return names.index(name)


def _follows(first: AP, cols: int, ap: AP) -> bool:
    """Whether ``ap`` (one contiguous row a partition) starts where ``cols`` contiguous
    elements from ``first`` end, in the same space, partitions and format."""
    return (ap.space, ap.dtype, ap.partition, ap.partitions) == \
        (first.space, first.dtype, first.partition, first.partitions) and \
        ap.dims == ((ap.free, 1),) and first.dims[-1][1] == 1 and len(first.dims) == 1 and \
        ap.offset == first.offset + cols * first.itemsize


def itemsize(dtype: str) -> int:
    return DTYPES[dtype][1]
