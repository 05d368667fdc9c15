"""A program for one NeuronCore: an instruction stream per engine and the HBM tensors."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hdl.core.isa import AP, DTYPES, Instruction

__all__ = ["HbmTensor", "Program"]


@dataclass(frozen=True)
class HbmTensor:
    """A row-major tensor in HBM at byte address ``offset``."""

    name: str
    offset: int
    shape: tuple[int, ...]
    dtype: str

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype][1]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.itemsize

    def ap(self, rows: tuple[int, int], cols: tuple[int, int] | None = None,
           row_step: int = 1) -> AP:
        """Rows ``rows[0]:rows[1]`` (as partitions) and columns ``cols`` of a 2-d tensor."""
        r0, r1 = rows
        c0, c1 = cols if cols is not None else (0, self.shape[1])
        width = self.shape[1]
        return AP("hbm", self.dtype, 0, r1 - r0, self.offset + (r0 * width + c0) * self.itemsize,
                  ((c1 - c0, 1),), pstride=width * self.itemsize * row_step)


@dataclass
class Program:
    """Instruction streams by engine (``tensor``, ``vector``, ``scalar``, ``gpsimd``,
    ``dma0`` ...) and the HBM tensors they address."""

    streams: dict[str, list[Instruction]] = field(default_factory=dict)
    tensors: dict[str, HbmTensor] = field(default_factory=dict)
    hbm_bytes: int = 0

    def tensor(self, name: str, shape, dtype: str) -> HbmTensor:
        """Place a new HBM tensor (64-byte aligned) and return it."""
        t = HbmTensor(name, self.hbm_bytes, tuple(int(s) for s in shape), dtype)
        self.tensors[name] = t
        self.hbm_bytes += -(-t.nbytes // 64) * 64
        return t

    def __len__(self) -> int:
        return sum(len(s) for s in self.streams.values())
