"""``nki.compiler`` (``ncc``): NKI's direct allocation, by which a kernel places its SBUF and
PSUM tensors itself, and the compiler directives kernels carry.

An on-chip tensor's shape is its block dimensions, then its partition dimension
(``nl.par_dim``), then its free dimensions; each block is a tile. ``buffer=ncc.sbuf.alloc(f)``
places block ``idx`` (a tuple, one integer per block dimension) at ``f(idx=idx,
pdim_size=partitions, fdim_size=bytes) -> (start_partition, byte_addr)``, ``bytes`` the
tile's bytes per partition; ``ncc.psum.alloc(f)`` at ``f(...) -> (bank, start_partition,
byte_addr)``. ``mod_alloc``
is ``alloc`` with the modulo placement NKI defines: along each block dimension ``d`` block
``i`` takes physical tile ``i % num_free_tiles[d]`` (likewise ``num_par_tiles`` over
partitions and ``num_bank_tiles`` over PSUM banks), the physical tiles laid out in row-major
order from ``base_addr`` (``base_partition``, ``base_bank``), one tile's bytes (partitions,
one bank) apart. So ``mod_alloc(base_addr=0, num_free_tiles=(2,))`` double-buffers a tensor
of any number of blocks. Tiles that share space are ordered by the accesses that touch it, as
any two accesses to the same memory are (:mod:`kernels.nki.tracer`).

Kernels cannot mix placed and automatically allocated tensors in NKI; here the tensors a
kernel does not place (the results of calls it does not assign into a placed tensor, and the
constants the lowering makes) are allocated by liveness in the space the placed ones leave.
``ncc.sbuf`` and ``auto_alloc()`` are ``nl.sbuf`` (likewise PSUM); ``@force_auto_alloc``
allocates every tensor of the kernel automatically, its placements ignored.
``skip_middle_end_transformations``, ``enable_stack_allocator`` and the loop directives
``multi_buffer`` and ``no_reorder`` steer NKI's compiler passes, which trngen does not have:
the program is the kernel as written, so they change nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from math import prod

from .errors import NkiError

__all__ = ["Placement", "enable_stack_allocator", "force_auto_alloc", "multi_buffer",
           "no_reorder", "psum", "sbuf", "skip_middle_end_transformations"]


@dataclass(frozen=True)
class Placement:
    """Where a tensor's blocks go: ``space`` "sbuf" or "psum"; ``func(idx=, pdim_size=,
    fdim_size=)`` gives (start partition, byte) in SBUF, (bank, start partition, byte) in
    PSUM."""

    space: str
    func: Callable

    def __str__(self) -> str:  # the buffer a kernel reads back as ``t.buffer``
        return self.space


def _modulo(base: int, tiles: tuple, scale: int, idx: tuple, call: str) -> int:
    """``base`` plus ``scale`` times the row-major position of ``idx`` modulo ``tiles``
    among ``tiles`` (each 1 where ``tiles`` is empty), as NKI's modulo allocation defines
    it: index ``d`` pairs with count ``d``, the longer of the two cut to the other's
    length."""
    tiles = tuple(int(t) for t in tiles) or (1,) * len(idx)
    if any(t < 1 for t in tiles):
        raise NkiError(f"{call}: tile counts must be positive, not {tiles}")
    return base + scale * sum(i % t * prod(tiles[d + 1:])
                              for d, (i, t) in enumerate(zip(idx, tiles, strict=False)))


def _sbuf_alloc(func: Callable) -> Placement:
    if not callable(func):
        raise NkiError(f"ncc.sbuf.alloc takes a function of (idx, pdim_size, fdim_size), "
                       f"not {func!r}")
    return Placement("sbuf", func)


def _sbuf_mod_alloc(*, base_addr, base_partition=0, num_par_tiles=(),
                    num_free_tiles=()) -> Placement:
    def place(idx, pdim_size, fdim_size):
        call = "ncc.sbuf.mod_alloc"
        return (_modulo(int(base_partition), num_par_tiles, pdim_size, idx, call),
                _modulo(int(base_addr), num_free_tiles, fdim_size, idx, call))
    return Placement("sbuf", place)


def _psum_alloc(func: Callable) -> Placement:
    if not callable(func):
        raise NkiError(f"ncc.psum.alloc takes a function of (idx, pdim_size, fdim_size), "
                       f"not {func!r}")
    return Placement("psum", func)


def _psum_mod_alloc(*, base_bank, base_addr=0, base_partition=0, num_bank_tiles=(),
                    num_par_tiles=(), num_free_tiles=()) -> Placement:
    def place(idx, pdim_size, fdim_size):
        call = "ncc.psum.mod_alloc"
        return (_modulo(int(base_bank), num_bank_tiles, 1, idx, call),
                _modulo(int(base_partition), num_par_tiles, pdim_size, idx, call),
                _modulo(int(base_addr), num_free_tiles, fdim_size, idx, call))
    return Placement("psum", place)


class _Space(str):
    """``ncc.sbuf`` / ``ncc.psum``: the memory's name (``buffer=ncc.sbuf`` is ``nl.sbuf``)
    and its placements ``alloc``, ``mod_alloc`` and ``auto_alloc``."""

    def __new__(cls, name: str, alloc, mod_alloc):
        s = super().__new__(cls, name)
        s.alloc, s.mod_alloc = alloc, mod_alloc
        return s

    def auto_alloc(self) -> str:
        return str(self)


sbuf = _Space("sbuf", _sbuf_alloc, _sbuf_mod_alloc)
psum = _Space("psum", _psum_alloc, _psum_mod_alloc)


def _auto(func):
    """``func`` marked to have every tensor allocated automatically."""
    @functools.wraps(func)
    def auto(*args, **kwargs):
        return func(*args, **kwargs)
    auto.__nki_auto_alloc__ = True
    return auto


def force_auto_alloc(kernel=None):
    """Allocate every tensor of ``kernel`` (a function or an ``nki.jit`` kernel)
    automatically, its placements ignored: ``@force_auto_alloc`` or
    ``@force_auto_alloc()``."""
    def apply(k):
        from .launch import Kernel

        if isinstance(k, Kernel):
            return Kernel(_auto(k.func), k.mode, k.grid, **k.options)
        return _auto(k)
    return apply(kernel) if callable(kernel) else apply


def _unchanged(kernel=None, **options):
    """A directive that changes nothing, bare (``@d``) or called (``@d(...)``)."""
    return kernel if callable(kernel) else (lambda k: k)


skip_middle_end_transformations = enable_stack_allocator = _unchanged


def multi_buffer(factor: int = 2) -> tuple:
    """A loop directive (``directives=`` of ``nl.sequential_range``): ``factor`` buffers
    of the loop's tensors, which allocation by liveness gives where SBUF has room."""
    return ("multi_buffer", int(factor))


def no_reorder() -> tuple:
    """A loop directive: the loop's operations in program order, as every loop's are."""
    return ("no_reorder",)
