"""The NKI tracer: a kernel's Python runs once, each call appends instructions to a program.

* **Tensors** (:class:`View`) are views of a :class:`Buffer` in HBM, SBUF or PSUM: dimensions
  (size, stride, kind), the partition dimension of an on-chip tensor counted in partitions
  and the others in elements. Indexing by integers, slices, ``nl.ds`` and index expressions
  (:class:`Index`, from ``nl.arange`` and ``nl.mgrid``) gives views; bounds are checked when
  an instruction uses the view, after its ``mask=`` has cut it (:class:`Mask`).
* **Allocation.** On-chip tensors are traced at offset 0 of their own buffer; once the
  kernel has run, :meth:`Tracer.allocate` places them by the program's liveness (a buffer
  lives from the first to the last instruction that touches it), next-fit in the order of
  first use, so that the tiles of successive loop iterations land on fresh space while
  there is room and iterations overlap (double buffering falls out); PSUM tiles never
  cross a bank. A tensor Python still holds after its last use takes no space. A tensor
  that does not fit in SBUF makes room by spilling, as NKI's compiler does: a live tensor
  goes to HBM between two of its uses (:meth:`Tracer.allocate`). A tensor the kernel
  places itself (``nki.compiler``, :class:`Placed`) stays where it is placed: its tiles are
  views of one buffer held from byte 0 of SBUF (one per PSUM bank), so that every access to
  the same bytes is ordered whichever tensor makes it; the other tensors take what is left.
* **Dependencies.** Every access records its footprint on its buffer; a read waits for the
  writes it overlaps (RAW), a write for the reads and writes it overlaps (WAR, WAW), and a
  write into space that dead tensors held for their last accesses. At the end,
  :meth:`Tracer.program` replays the instructions in order through
  :class:`~kernels.builder.Builder`: a wait before each instruction for every other stream it
  depends on, a signal after each instruction another stream waits for.
* **Results.** An op's result is *pending* until the next call: ``t[...] = op(...)`` and
  ``psum += matmul(...)`` write the op's result straight into ``t`` (no copy), as NKI's
  compiler does; any other use gives the op its own new tile.
"""

from __future__ import annotations

import itertools
import math
import sys
from bisect import bisect_left, insort
from dataclasses import dataclass, replace
from heapq import heapify, heappop, heappush
from typing import NamedTuple

import ml_dtypes
import numpy as np

from hdl.core.isa import (
    AP,
    DTYPES,
    FREE_MAX,
    DmaCompute,
    DmaCopy,
    Memset,
    draws_random,
    reach,
)
from hdl.core.params import CoreParams
from hdl.numerics.dtypes import ML_DTYPES
from kernels.builder import SBUF_ALIGN, Builder

from .errors import NkiError, NotSupported, kernel_line

__all__ = ["TF32", "Affine", "AffineLoop", "Buffer", "DynamicLoop", "Index", "Mask", "Placed",
           "Predicate", "Register", "SequentialLoop", "Tracer", "View", "cross_core_race",
           "current", "isa_dtype", "near", "numpy_dtype"]

#: NKI's ``tfloat32`` (a four-byte void type, as NKI spells it).
TF32 = np.dtype("V4")
#: NKI's MX quad types (``nl.float8_e4m3fn_x4``, ``nl.float8_e5m2_x4``,
#: ``nl.float4_e2m1fn_x4``): four codes in one element [NKI-DT], to numpy a word of their own
#: (a record, so that none equals another).
MX_NUMPY = {"mxfp8_x4": np.dtype([("float8_e4m3fn_x4", "<u4")]),
            "mxfp8_e5m2_x4": np.dtype([("float8_e5m2_x4", "<u4")]),
            "mxfp4_x4": np.dtype([("float4_e2m1fn_x4", "<u2")])}
_NUMPY = {**{name: np.dtype(t) for name, t in ML_DTYPES.items()}, "tf32": TF32,
          "int8": np.dtype(np.int8), "int32": np.dtype(np.int32),
          "uint32": np.dtype(np.uint32), "uint8": np.dtype(np.uint8),
          "uint16": np.dtype(np.uint16), **MX_NUMPY}
_ISA = {v: k for k, v in _NUMPY.items()}
_ISA[np.dtype(np.bool_)] = "uint8"  # NKI's bool: a byte, 0 or 1
#: NKI's ``float8_e8m0fnu``, the MX scales' power-of-two exponents: bytes to the core, which
#: only an MX matmul reads as scales (``nisa.nc_matmul_mx``)
_ISA[np.dtype(ml_dtypes.float8_e8m0fnu)] = "uint8"
FLOATS = ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fn", "tf32")
#: Rank of a format in NKI's type promotion (the wider wins).
_RANK = {"mxfp4_x4": 0, "mxfp8_x4": 0, "mxfp8_e5m2_x4": 0,
         "fp8_e5m2": 0, "fp8_e4m3": 0, "fp8_e4m3fn": 0, "bf16": 1, "fp16": 1, "tf32": 2,
         "fp32": 3, "int8": -3, "uint8": -3, "uint16": -2.5, "int32": -2, "uint32": -2}

#: Alignment of a tile in PSUM, bytes per partition (two fp32 words).
PSUM_ALIGN = 8


def isa_dtype(dtype) -> str:
    """The ISA's name of an NKI/numpy dtype (``nl.bfloat16``, ``np.float32``, ``"bf16"``)."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is not None and dt in _ISA:
        return _ISA[dt]
    name = repr(dtype) if dt is None else dt.names[0] if dt.names else dt.name
    raise NotSupported(f"dtype {name}",
                       "float32, bfloat16, float16, float8_e4m3, float8_e5m2, "
                       "float8_e4m3fn, tfloat32, float8_e4m3fn_x4, float8_e5m2_x4, "
                       "float4_e2m1fn_x4, int8, "
                       "int32, uint8, uint16, uint32, bool (as uint8)")


def numpy_dtype(name: str) -> np.dtype:
    return _NUMPY[name]


def promote(*names: str) -> str:
    return max(names, key=lambda n: _RANK[n])


# --- index expressions and masks ----------------------------------------------------------

class Index:
    """``start + step * t`` for ``t`` in ``0 .. size - 1`` along axis ``axis`` of an
    ``ndim``-dimensional iteration space (``nl.arange(n)[:, None]`` is axis 0 of 2)."""

    __slots__ = ("axis", "ndim", "size", "start", "step")

    def __init__(self, axis: int, ndim: int, size: int, start: int = 0, step: int = 1):
        self.axis, self.ndim, self.size, self.start, self.step = axis, ndim, size, start, step

    def _like(self, start, step):
        return Index(self.axis, self.ndim, self.size, start, step)

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if self.ndim != 1 or sum(k is not None for k in key) != 1 or any(
                k is not None and k != slice(None) for k in key):
            raise NotSupported("this subscript of an nl.arange",
                               "nl.arange(n)[:, None] and nl.arange(n)[None, :]")
        axis = next(i for i, k in enumerate(key) if k is not None)
        return Index(axis, len(key), self.size, self.start, self.step)

    def __add__(self, other):
        if isinstance(other, (Affine, View)):
            return other + self
        if isinstance(other, Index):
            if other.axis == self.axis and other.size == self.size:
                return self._like(self.start + other.start, self.step + other.step)
            return Affine.of(self) + other
        return self._like(self.start + _int(other), self.step)

    __radd__ = __add__

    def __sub__(self, other):
        return self + (other * -1 if isinstance(other, (Index, Affine)) else -other)

    def __rsub__(self, other):
        return self * -1 + other

    def __mul__(self, other):
        if isinstance(other, Index):
            raise NotSupported("a product of two index expressions",
                               "affine expressions a * i + b")
        c = _int(other)
        return self._like(self.start * c, self.step * c)

    __rmul__ = __mul__

    def __neg__(self):
        return self * -1

    def _bound(self, op: str, value) -> Mask | Predicate:
        if isinstance(value, (Index, Affine)):
            return Predicate(self - value, op)
        v = _int(value)
        # t such that start + step * t  op  v, as a half-open range of t
        lo, hi = 0, self.size
        s, b = self.step, self.start
        if s == 0:
            ok = {"<": b < v, "<=": b <= v, ">": b > v, ">=": b >= v}[op]
            return Mask({self.axis: (0, self.size if ok else 0)})
        if s < 0:  # flip: -start - |s| t  op'  -v
            return Index(self.axis, self.ndim, self.size, -b, -s)._bound(
                {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op], -v)
        if op == "<":
            hi = min(hi, -(-(v - b) // s))
        elif op == "<=":
            hi = min(hi, (v - b) // s + 1)
        elif op == ">":
            lo = max(lo, (v - b) // s + 1)
        else:
            lo = max(lo, -(-(v - b) // s))
        mask = Mask({self.axis: (max(lo, 0), max(min(hi, self.size), 0))})
        mask.predicate = Predicate(self - v, op)
        return mask

    def __lt__(self, v):
        return self._bound("<", v)

    def __le__(self, v):
        return self._bound("<=", v)

    def __gt__(self, v):
        return self._bound(">", v)

    def __ge__(self, v):
        return self._bound(">=", v)

    def __repr__(self):
        return f"Index(axis={self.axis}, {self.start} + {self.step} * [0, {self.size}))"


class Affine:
    """``const + sum(coef[a] * t_a)`` over the axes ``a`` of an ``ndim``-dimensional
    iteration space (``sizes[a]`` positions each): an ``nl.arange`` / ``nl.mgrid``
    expression over more than one axis, as ``nisa.iota`` and ``nisa.affine_select`` take."""

    __slots__ = ("ndim", "sizes", "coef", "const")

    def __init__(self, ndim: int, sizes: dict, coef: dict, const: int):
        self.ndim, self.sizes, self.coef, self.const = ndim, sizes, coef, const

    @staticmethod
    def of(x) -> Affine:
        if isinstance(x, Affine):
            return x
        if isinstance(x, Index):
            return Affine(x.ndim, {x.axis: x.size}, {x.axis: x.step}, x.start)
        return Affine(0, {}, {}, _int(x))

    def __add__(self, other):
        if isinstance(other, View):
            return other + self
        o = Affine.of(other)
        sizes, coef = dict(self.sizes), dict(self.coef)
        for axis, size in o.sizes.items():
            if sizes.get(axis, size) != size:
                raise NotSupported("an index expression over one axis of two sizes",
                                   "expressions over the axes of one nl.mgrid")
            sizes[axis] = size
            coef[axis] = coef.get(axis, 0) + o.coef[axis]
        return Affine(max(self.ndim, o.ndim), sizes, coef, self.const + o.const)

    __radd__ = __add__

    def __mul__(self, other):
        c = _int(other)
        return Affine(self.ndim, self.sizes, {a: k * c for a, k in self.coef.items()},
                      self.const * c)

    __rmul__ = __mul__

    def __neg__(self):
        return self * -1

    def __sub__(self, other):
        return self + Affine.of(other) * -1

    def __rsub__(self, other):
        return self * -1 + other

    def __lt__(self, v):
        return Predicate(self - v, "<")

    def __le__(self, v):
        return Predicate(self - v, "<=")

    def __gt__(self, v):
        return Predicate(self - v, ">")

    def __ge__(self, v):
        return Predicate(self - v, ">=")

    def __repr__(self):
        terms = " + ".join(f"{c} * t{a}" for a, c in sorted(self.coef.items()))
        return f"Affine({self.const} + {terms})"

    def __getitem__(self, key):
        raise NotSupported("a subscript of an index expression over two axes",
                           "nl.arange(n)[:, None] + nl.arange(m)[None, :]")


class Predicate:
    """``expr op 0`` for an affine ``expr`` (:class:`Affine` or :class:`Index`): the
    predicate of ``nisa.affine_select``."""

    __slots__ = ("expr", "op")

    def __init__(self, expr, op: str):
        self.expr, self.op = Affine.of(expr), op

    def __bool__(self):
        raise NkiError("the truth value of an index comparison is ambiguous: control flow "
                       "cannot depend on an nl.arange", "err_control_flow_condition_"
                                                         "depending_on_arange")

    def __and__(self, other):
        raise NotSupported("a predicate of two comparisons joined by &",
                           "one comparison of an affine expression")

    __rand__ = __and__


def dropped(mask) -> bool:
    """Whether ``mask=`` drops the instruction: a False condition (NKI executes an
    instruction whose mask is false for every position nowhere)."""
    return mask is False


class Mask:
    """An affine ``mask=``: per axis of the instruction's iteration space, the range
    ``[lo, hi)`` of positions it keeps; ``&`` intersects. A single comparison keeps its
    :class:`Predicate` too."""

    __slots__ = ("ranges", "predicate")

    def __init__(self, ranges: dict[int, tuple[int, int]]):
        self.ranges = ranges
        self.predicate = None

    def __and__(self, other):
        if isinstance(other, bool):  # a condition on loop indices alone
            return self if other else False
        if not isinstance(other, Mask):
            raise NotSupported("this mask expression", "comparisons of index expressions "
                                                       "with integers joined by &")
        out = dict(self.ranges)
        for axis, (lo, hi) in other.ranges.items():
            a, b = out.get(axis, (lo, hi))
            out[axis] = (max(a, lo), min(b, hi))
        return Mask(out)

    __rand__ = __and__

    def __or__(self, other):
        raise NotSupported("mask | mask", "masks joined by &")

    def __invert__(self):
        raise NotSupported("~mask", "masks joined by &")

    def __bool__(self):
        raise NkiError("the truth value of an index comparison is ambiguous: control flow "
                       "cannot depend on an nl.arange", "err_control_flow_condition_"
                                                         "depending_on_arange")


def _int(v) -> int:
    if isinstance(v, (bool, np.bool_)):
        raise NotSupported("a boolean index", "integers")
    if isinstance(v, (int, np.integer)):
        return int(v)
    raise NotSupported(f"the index value {v!r}", "integers, slices, nl.ds, nl.arange and "
                                                 "nl.mgrid expressions")


@dataclass(frozen=True)
class DSlice:
    """``nl.ds(start, size)``."""

    start: int
    size: int


# --- buffers, footprints, dependencies ----------------------------------------------------

#: The streams of the compute engines, whose repeated instructions are computed once
#: (:meth:`Tracer.merge_repeats`).
_COMPUTE = ("vector", "scalar", "gpsimd")


class _Node:
    """An instruction of the trace: its stream, the instructions of other streams it
    waits for (``deps``) and the operands that :meth:`Tracer.program` moves to their
    buffers' offsets (``moved``: (field, buffer) pairs), and the ``nl.affine_range``
    iterations it was traced in (``loops``: (loop, iteration) pairs, outermost first);
    ``where``, the kernel's line that made it."""

    __slots__ = ("stream", "ins", "deps", "signal", "event", "index", "moved", "loops",
                 "where")

    def __init__(self, stream, ins, index, loops=(), where=""):
        self.stream, self.ins, self.index = stream, ins, index
        self.loops = loops  # the affine_range iterations it was traced in (Tracer.loops)
        self.where = where
        self.deps = ()
        self.signal = False
        self.event = None
        self.moved = ()


class _Record:
    """One access's footprint, the node that wrote it (None for a read or an inherited
    range) and the nodes that read it since, the latest of each stream alone: an engine's
    stream runs in order, so waiting for its latest reader waits for all of them. A write
    keeps its access pattern and whether the instruction also read what it wrote (an
    accumulation: ``+=``, a matmul accumulating in PSUM, ``nl.loop_reduce``)."""

    __slots__ = ("fp", "writer", "readers", "ap", "update")

    def __init__(self, fp, writer, readers, ap=None, update=False):
        self.fp, self.writer, self.readers = fp, writer, _latest(readers)
        self.ap, self.update = ap, update


def _latest(nodes) -> dict:
    """The latest of ``nodes`` of each stream, by stream."""
    out: dict = {}
    for n in nodes:
        have = out.get(n.stream)
        if have is None or have.index < n.index:
            out[n.stream] = n
    return out


def _wait_for(node: _Node, held) -> None:
    """Make ``node`` wait for the nodes ``held`` too (the latest of each other stream)."""
    deps = {d.stream: d for d in node.deps}
    for h in held:
        if h.stream != node.stream:
            have = deps.get(h.stream)
            if have is None or have.index < h.index:
                deps[h.stream] = h
    node.deps = tuple(deps.values())


def footprint(ap: AP) -> tuple:
    """An access's footprint: on chip (partition range, byte range in the partition); in HBM
    (first byte, row stride, rows, bytes per row)."""
    lo = hi = 0
    for n, s in ap.dims:
        if s >= 0:
            hi += (n - 1) * s
        else:
            lo += (n - 1) * s
    item = ap.itemsize
    if ap.space == "hbm":
        rows = ap.partitions if ap.pstride else 1
        return (ap.offset + lo * item, ap.pstride if rows > 1 else 0, rows,
                (hi - lo + 1) * item)
    return (ap.partition, ap.partition + ap.partitions, ap.offset + lo * item,
            ap.offset + (hi + 1) * item)


def _span(f):
    start, p, rows, w = f
    return start, start + (rows - 1) * p + w


def overlaps(a, b, hbm: bool) -> bool:
    """Whether two footprints (:func:`footprint`) share a byte."""
    if not hbm:
        return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]
    a0, a1 = _span(a)
    b0, b1 = _span(b)
    if a0 >= b1 or b0 >= a1:
        return False
    if a[2] == 1 and b[2] == 1:
        return True
    if a[2] == 1:
        a, b = b, a
    if b[2] == 1:  # rows of a against one interval of b
        s, p, rows, w = a
        first = max(0, (b0 - s - w) // p + 1)
        last = min(rows - 1, (b1 - 1 - s) // p)
        return first <= last
    if a[1] != b[1] or a[3] > a[1] or b[3] > b[1]:
        return True  # different row strides: their bounding boxes overlap
    p = a[1]
    q, r = divmod(b[0] - a[0], p)
    # b's row j sits in a's row q + j at offset r (and may run into row q + j + 1)
    def rows_meet(shift):
        lo, hi = max(0, -(q + shift)), min(b[2], a[2] - (q + shift))
        return lo < hi
    return (r < a[3] and rows_meet(0)) or (r + b[3] > p and rows_meet(1))


def _elements(ap: AP) -> np.ndarray:
    """The bytes an access touches: offsets in HBM, or in the partition on chip."""
    item = ap.itemsize
    offs = np.zeros(1, np.int64)
    for n, s in ap.dims:
        offs = (offs[:, None] + np.arange(n, dtype=np.int64) * s).ravel()
    offs = ap.offset + offs * item
    if ap.space == "hbm" and ap.pstride and ap.partitions > 1:
        offs = (np.arange(ap.partitions, dtype=np.int64)[:, None] * ap.pstride
                + offs).ravel()
    return np.unique((offs[:, None] + np.arange(item, dtype=np.int64)).ravel())


#: Bytes of two accesses past which :func:`_share_bytes` compares them by their outermost
#: dimension's residues rather than byte by byte (the same answer, in less time and memory).
_ENUMERATED = 1 << 20


def _bytes(ap: AP) -> int:
    n = ap.itemsize * math.prod(d[0] for d in ap.dims)
    return n * ap.partitions if ap.space == "hbm" and ap.pstride else n


def _share_bytes(a: AP, b: AP) -> bool:
    """Whether two accesses of one buffer share a byte, exactly (on chip their partition
    ranges already meet: :func:`overlaps`). Large ones (an access at a run-time index
    spans every place the index may move it to) are split at the outermost dimension of
    the larger, ``x + i S`` for ``i`` below its count: two bytes meet where their residues
    modulo ``S`` agree and their quotients lie within the counts of each other."""
    if _bytes(a) + _bytes(b) <= _ENUMERATED:
        return bool(np.intersect1d(_elements(a), _elements(b), assume_unique=True).size)
    big = a if _bytes(a) >= _bytes(b) else b
    stride = big.dims[0][1] * big.itemsize if big.dims else 0
    if stride <= 0:
        return bool(np.intersect1d(_elements(a), _elements(b), assume_unique=True).size)

    def split(ap: AP) -> tuple[int, np.ndarray]:
        if ap.dims and ap.dims[0][1] * ap.itemsize == stride:
            return ap.dims[0][0], _elements(replace(ap, dims=ap.dims[1:]))
        return 1, _elements(ap)

    (na, ea), (nb, eb) = split(a), split(b)
    # x + i S == y + j S  <=>  x = y (mod S) and y // S - x // S in (-nb, na)
    span = int(max(ea.max(), eb.max()) // stride) + na + nb + 1
    keys = np.sort((eb % stride) * span + eb // stride)
    base = (ea % stride) * span
    q = ea // stride
    lo = np.searchsorted(keys, base + np.maximum(q - (nb - 1), 0), "left")
    hi = np.searchsorted(keys, base + q + (na - 1), "right")
    return bool((hi > lo).any())


def cross_core_race(programs, lines, private=(), landed=None) -> tuple | None:
    """Two DMAs of different cores, among ``programs`` (one phase of each core: between
    two meetings nothing orders one core's accesses against another's), that touch a byte
    of HBM in common, one writing it: ``((core, stream, index) of the writing one,
    (core, stream, index) of the other)``, or None. Not compared: the side of an indirect
    DMA that its index moves unless ``landed`` gives where it landed (each core's
    :attr:`~sim.core.data.Data.landed` of a run of the phase), an access within a tensor
    each core has its own of (``private``: their byte ranges), and a place that both cores
    write by the same kernel line (``lines``: each core's instructions' lines): a kernel
    computing the same result on every core."""
    accesses = []  # (first byte, end, core, stream, index, written, ap)
    for core, program in enumerate(programs):
        for stream, instructions in program.streams.items():
            if not stream.startswith("dma"):
                continue
            for i, ins in enumerate(instructions):
                moved = getattr(ins, "index", None) is not None and \
                    ("dst" if ins.index_dst else "src")
                for name, ap, written in ins.operands():
                    if ap.space == "hbm" and name != moved:
                        lo, hi = _span(footprint(ap))
                        if not any(a <= lo and hi <= b for a, b in private):
                            accesses.append((lo, hi, core, stream, i, written, ap))
        for stream, i, ap, written in (landed[core] or ()) if landed else ():
            lo, hi = _span(footprint(ap))
            if not any(a <= lo and hi <= b for a, b in private):
                accesses.append((lo, hi, core, stream, i, written, ap))
    if not any(a[5] for a in accesses):
        return None
    lo = np.array([a[0] for a in accesses], np.int64)
    hi = np.array([a[1] for a in accesses], np.int64)
    core = np.array([a[2] for a in accesses], np.int64)
    # the writes each core makes, by place and line: one every core makes is one result
    both = {}
    for a in accesses:
        if a[5]:
            both.setdefault((a[6], lines[a[2]].get(a[3:5])), set()).add(a[2])
    for w in accesses:
        if not w[5]:
            continue
        for j in np.flatnonzero((lo < w[1]) & (hi > w[0]) & (core != w[2])):
            other = accesses[j]
            if other[2] in both[(w[6], lines[w[2]].get(w[3:5]))]:
                continue  # the other core writes these bytes as this core does
            if overlaps(footprint(w[6]), footprint(other[6]), True) \
                    and _share_bytes(w[6], other[6]):
                return w[2:5], other[2:5]
    return None


def _parallel_iterations(a: tuple, b: tuple):
    """The ``nl.affine_range`` loop and the two iterations of it that two instructions'
    loop contexts (:attr:`_Node.loops`) first differ in; None if they first differ in
    different loops (one after the other) or one context holds the other."""
    for (la, ia), (lb, ib) in zip(a, b, strict=False):
        if la is not lb:
            return None
        if ia != ib:
            return la, ia, ib
    return None


def near(line: str, here: str) -> str:
    """``file:line`` as ``line N`` when ``here`` is in the same file."""
    file, _, n = line.rpartition(":")
    return f"line {n}" if here.rpartition(":")[0] == file else line


def _contains(a, b, hbm: bool) -> bool:
    if not hbm:
        return a[0] <= b[0] and b[1] <= a[1] and a[2] <= b[2] and b[3] <= a[3]
    if a == b:
        return True
    if a[2] == 1 and b[2] == 1:
        return a[0] <= b[0] and b[0] + b[3] <= a[0] + a[3]
    if a[1] == b[1] and a[1]:
        q, r = divmod(b[0] - a[0], a[1])
        return r + b[3] <= a[3] and q >= 0 and q + b[2] <= a[2]
    return False


class Buffer:
    """Memory of one NKI tensor: HBM bytes from ``offset``, or on chip ``nbytes`` per
    partition in every partition. An on-chip buffer's accesses are traced against offset 0;
    :meth:`Tracer.allocate` gives it its offset once the program is known, from the first
    to the last instruction that touches it (a buffer no instruction touches takes no
    space). ``where`` is the kernel line that made it."""

    __slots__ = ("space", "name", "offset", "nbytes", "hbm", "writes", "reads", "zero",
                 "where", "what", "first", "last", "latest", "written", "fixed", "claims",
                 "placings")

    def __init__(self, space: str, name: str, offset: int, nbytes: int, hbm=None,
                 where: str = "", what: str = ""):
        self.space, self.name = space, name
        self.offset, self.nbytes, self.hbm = offset, nbytes, hbm
        self.writes: list[_Record] = []
        self.reads: list[_Record] = []
        self.zero = False  # PSUM zeros not yet written (the first matmul overwrites)
        self.where, self.what = where, what
        self.first = self.last = -1  # the first and last instruction that touch it
        self.latest: dict = {}  # the latest of those instructions of each stream
        self.written: list = []  # (instruction, footprint) of its writes, in order
        self.fixed = False  # placed by the kernel (nki.compiler): at ``offset`` all along
        #: of a placed buffer: (footprint, instructions traced before) of each tile a
        #: tensor took in it, the newest last (writes before it were another tensor's)
        self.claims: list[tuple[tuple, int]] = []
        #: of a placed buffer: every (footprint, instructions traced before) in order
        self.placings: list[tuple[tuple, int]] = []

    def touch(self, node: _Node) -> None:
        """Count instruction ``node``, the latest so far, among those that touch it."""
        if self.first < 0:
            self.first = node.index
        self.last = node.index
        self.latest[node.stream] = node


class _Hold(NamedTuple):
    """One life of a buffer the kernel placed (:meth:`Tracer._placed_lives`): its range
    held from instruction ``first`` to ``last``."""

    buf: Buffer
    first: int
    last: int


_P, _F = True, False


class _Typed:
    """The element type's answers of an NKI tensor of type ``dt``."""

    __slots__ = ()

    @property
    def dtype(self):
        return _NUMPY[self.dt]

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dt][1]


class Dynamic:
    """An index whose value is read at run time: the integer ``tile`` holds (one element of
    an on-chip tile) plus ``expr``, as ``t[..., offsets[0, i] + iy]`` subscripts a free
    dimension of an on-chip tensor (``nisa.tensor_copy_dynamic_src``)."""

    __slots__ = ("tile", "expr")

    def __init__(self, tile: View, expr: Affine):
        self.tile, self.expr = tile, expr


class Moved:
    """Where a view's source moves at run time (:meth:`View._dynamic`): by the integer
    ``tile`` holds times ``stride`` elements, the integer one of ``0 .. count - 1``."""

    __slots__ = ("tile", "stride", "count")

    def __init__(self, tile: View, stride: int, count: int):
        self.tile, self.stride, self.count = tile, stride, count


class Indirect:
    """The rows an HBM view takes from a tile (:meth:`View._indirect`): ``tile``, one row
    index a partition; ``rows`` of the tensor and ``row_bytes`` between them. With
    ``scalar``, ``tile`` is one index (NKI's ``scalar_offset``) that moves the whole view by
    ``row_bytes`` each, ``rows`` the indices that keep it within its tensor."""

    __slots__ = ("tile", "rows", "row_bytes", "scalar")

    def __init__(self, tile: View, rows: int, row_bytes: int, scalar: bool = False):
        self.tile, self.rows, self.row_bytes, self.scalar = tile, rows, row_bytes, scalar


def _pattern(pattern) -> list[tuple[int, int]]:
    """An access pattern's [stride, count] pairs as integers (NKI's error otherwise)."""
    try:
        pairs = [(int(stride), int(count)) for stride, count in pattern]
    except (TypeError, ValueError) as e:
        raise NkiError(f".ap takes a pattern of [stride, count] pairs, not {pattern!r}") from e
    if not pairs or any(count < 1 for _, count in pairs):
        raise NkiError(f".ap takes a pattern of [stride, count] pairs with counts of at least "
                       f"1, not {pattern!r}")
    return pairs


def _extent(start: int, pairs) -> tuple[int, int]:
    """The lowest and highest element offsets ``pairs`` (stride, count) reach from ``start``."""
    return (start + sum(min(0, s * (c - 1)) for s, c in pairs),
            start + sum(max(0, s * (c - 1)) for s, c in pairs))


class View(_Typed):
    """An NKI tensor: ``dims`` ((size, stride, is_partition), ...) over ``buf`` from
    partition ``part`` and byte ``off``; ``checks`` the bounds of indexed dimensions
    (axis, first value, step, limit, dimension, tensor), enforced when an instruction uses
    the view."""

    __slots__ = ("buf", "dt", "dims", "part", "off", "checks", "index", "moved",
                 "__weakref__")

    def __init__(self, buf: Buffer, dt: str, dims, part: int = 0, off: int = 0,
                 checks=(), index: Indirect | None = None, moved: Moved | None = None):
        self.buf, self.dt, self.dims, self.part, self.off = buf, dt, tuple(dims), part, off
        self.checks = tuple(checks)
        #: of an HBM tensor indexed by a tile (``t[idx, ...]``): the rows it takes
        self.index = index
        #: of an on-chip view subscripted at a run-time offset: where it moves
        self.moved = moved

    # --- the tensor interface -----------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(d[0] for d in self.dims)

    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def buffer(self) -> str:
        return self.buf.space

    def __repr__(self):
        return f"<NKI tensor {self.buf.name}{list(self.shape)} {self.dt} in {self.buf.space}>"

    def __len__(self):
        return self.dims[0][0]

    def __bool__(self):
        """An HBM tensor (a kernel's argument or output) is there: true, as ``if t`` asks
        of an optional argument. So is any tensor in NKI 0.2, where a tensor is an object of
        specialization time (its language guide: every branch resolved before device code;
        aws-neuron/nki-library tests optional tiles so); in 0.1 an on-chip tile's truth would
        be its values' (``err_ambiguous_tensor_truth_value``)."""
        if self.buf.space == "hbm" or (tracing() and _CURRENT[-1].generation == 2):
            return True
        raise NkiError("the truth value of a tensor is ambiguous: control flow cannot "
                       "depend on tensor values", "err_ambiguous_tensor_truth_value")

    def __iter__(self):
        raise NotSupported("iterating over a tensor", "indexing with nl.affine_range loops")

    def _with(self, dims, part, off, checks):
        return View(self.buf, self.dt, dims, part, off, checks, self.index, self.moved)

    def __getitem__(self, key) -> View:
        key = key if isinstance(key, tuple) else (key,)
        if self.index is not None or self.moved is not None:
            raise NotSupported("indexing a tensor already indexed by a tile",
                               "one subscript of an HBM tensor with a tile of row indices")
        if self.buf.space != "hbm" and any(isinstance(k, (View, Dynamic)) for k in key):
            return self._dynamic(key)
        at = next((i for i, k in enumerate(key) if isinstance(k, View)), None)
        if at is not None:
            if any(not isinstance(k, (int, np.integer)) for k in key[:at]):
                raise NotSupported("a tile of row indices after a subscript that is not an "
                                   "integer", "integers before the tile")
            return (self[key[:at]] if at else self)._indirect(key[at:])
        if any(isinstance(k, (Index, Affine)) for k in key) and \
                any(isinstance(k, (slice, DSlice)) for k in key):
            raise NkiError("Mixing basic tensor indexing and advanced tensor indexing is not "
                           "supported", "err_unsupported_mixing_basic_advanced_tensor_"
                                        "indexing")
        if any(k is Ellipsis for k in key):
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (len(self.dims) - len(key) + 1) + key[i + 1:]
        if len(key) > len(self.dims):
            raise NkiError(f"too many indices ({len(key)}) for tensor {self.buf.name} of "
                           f"shape {list(self.shape)}", "err_tensor_access_out_of_bound")
        key = key + (slice(None),) * (len(self.dims) - len(key))
        part, off, item = self.part, self.off, self.itemsize
        out, checks = [], list(self.checks)
        axes = []
        kept = None  # a free dimension an integer indexed
        for d, (k, (size, stride, is_p)) in enumerate(zip(key, self.dims, strict=True)):
            if isinstance(k, Index):
                axes.append((k.axis, k, d))
                continue
            if isinstance(k, Affine):  # one dimension of the view per axis of the sum
                lo = k.const + sum(min(0, c * (k.sizes[a] - 1)) for a, c in k.coef.items())
                hi = k.const + sum(max(0, c * (k.sizes[a] - 1)) for a, c in k.coef.items())
                if lo < 0 or hi >= size:
                    raise NkiError(f"Out-of-bound access for tensor `{self.buf.name}` on "
                                   f"dimension {d}: index range [{lo}, {hi}] exceed "
                                   f"dimension size of {size}",
                                   "err_tensor_access_out_of_bound")
                part, off = self._shift(part, off, k.const, stride, is_p, item)
                axes += [(a, Index(a, k.ndim, k.sizes[a], 0, c), None, is_p, stride)
                         for a, c in k.coef.items()]
                continue
            if isinstance(k, (slice, DSlice)):
                if isinstance(k, DSlice):
                    start, stop, step = k.start, k.start + k.size, 1
                else:
                    if k.step is not None and _int(k.step) <= 0:
                        raise NotSupported("a slice with a step below 1", "steps of 1 or more")
                    step = 1 if k.step is None else _int(k.step)
                    start = 0 if k.start is None else _int(k.start)
                    stop = size if k.stop is None else _int(k.stop)
                    if start < 0:
                        start += size
                    if stop < 0:
                        stop += size
                n = max(0, -(-(stop - start) // step))
                part, off = self._shift(part, off, start, stride, is_p, item)
                if start < 0 or start + (n - 1) * step >= size:
                    checks.append([len(out), start, step, size, d, self.buf.name])
                out.append((n, stride * step, is_p))
                continue
            i = _int(k)
            if i < 0:
                i += size
            if not 0 <= i < size:
                raise NkiError(f"Out-of-bound access for tensor `{self.buf.name}` on "
                               f"dimension {d}: index {k} exceed dimension size of {size}",
                               "err_tensor_access_out_of_bound")
            part, off = self._shift(part, off, i, stride, is_p, item)
            if not is_p:
                kept = (1, stride, False)
        if axes:
            if len({e[0] for e in axes}) != len(axes):
                raise NotSupported("two tensor dimensions indexed by the same axis",
                                   "one nl.arange/nl.mgrid axis per indexed dimension")
            for _, k, d, *term in sorted(axes, key=lambda a: a[0]):
                if d is None:  # a term of an expression over several axes, bounds checked
                    is_p, stride = term
                    out.append((k.size, stride * k.step, is_p))
                    continue
                size, stride, is_p = self.dims[d]
                part, off = self._shift(part, off, k.start, stride, is_p, item)
                lo, hi = min(k.start, k.start + k.step * (k.size - 1)), \
                    max(k.start, k.start + k.step * (k.size - 1))
                if lo < 0 or hi >= size:
                    checks.append([len(out), k.start, k.step, size, d, self.buf.name])
                out.append((k.size, stride * k.step, is_p))
        if kept is not None and len(out) == 1 and out[0][2] and self.buf.space != "hbm":
            # SBUF and PSUM are two-dimensional: a tile keeps a free dimension, as
            # ``t[:, i]`` of an on-chip tensor is a [P, 1] tile in NKI
            out.append(kept)
        ndim = max((e[1].ndim for e in axes if e[2] is not None), default=0)
        if self.buf.space == "hbm" and ndim > len(out) == len(axes) and kept is None:
            # an index expression's shape: ``t[nl.arange(n)[:, None]]`` of a
            # one-dimensional tensor is [n, 1]
            used = {e[0] for e in axes}
            for a in range(ndim):
                if a not in used:
                    out.insert(a, (1, 1, False))
        return self._with(out, part, off, [tuple(c) for c in checks])

    def _dynamic(self, key) -> View:
        """``t[..., offsets[0, i] + e, ...]`` of on-chip ``t``: the view at ``e``, moved at
        run time along that free dimension by the integer the tile holds
        (:class:`Moved`), which may be as large as keeps every place of ``e`` inside it."""
        at = [i for i, k in enumerate(key) if isinstance(k, (View, Dynamic))]
        if len(at) != 1 or at[0] == 0 or at[0] >= len(self.dims):
            raise NotSupported("a run-time offset in this subscript",
                               "one run-time offset, on a free dimension")
        d = at[0]
        dyn = key[d] if isinstance(key[d], Dynamic) else Dynamic(key[d], Affine.of(0))
        tile = dyn.tile
        if tile.buf.space == "hbm" or tile.dt not in ("int32", "uint32") or \
                int(np.prod(tile.shape)) != 1:
            raise NkiError(f"a run-time offset into tensor `{self.buf.name}` is one int32 or "
                           f"uint32 element of an on-chip tile, not {list(tile.shape)} "
                           f"{tile.dt} in {tile.buf.space}")
        e = dyn.expr
        static = e if e.coef else e.const
        v = self[tuple(key[:d]) + (static,) + tuple(key[d + 1:])]
        size, stride, _ = self.dims[d]
        hi = e.const + sum(max(0, c * (e.sizes[a] - 1)) for a, c in e.coef.items())
        return View(v.buf, v.dt, v.dims, v.part, v.off, v.checks, None,
                    Moved(tile, stride, size - hi))

    def _indirect(self, key) -> View:
        """``t[idx, ...]`` of HBM tensor ``t``: the rows of its first dimension that the
        integers of on-chip tile ``idx`` name, one a partition (read or written by an
        indirect DMA); the other subscripts as they are."""
        idx = key[0].as_column()
        if self.buf.space != "hbm" or not self.dims:
            raise NotSupported(f"indexing a tensor in {self.buf.space.upper()} by a tile",
                               "a tile of row indices into an HBM tensor")
        if idx.buf.space == "hbm" or idx.dt not in ("int32", "uint32") \
                or int(np.prod(idx.shape[1:])) != 1:
            raise NkiError(f"the row indices of tensor `{self.buf.name}` must be an on-chip "
                           f"int32 or uint32 tile of one element a partition, not "
                           f"{list(idx.shape)} {idx.dt} in {idx.buf.space}")
        parts = idx.shape[0]
        ndim = next((k.ndim for k in key[1:] if isinstance(k, Index)), 0)
        first = Index(0, ndim, parts) if ndim else slice(0, parts)
        rows, stride, is_p = self.dims[0]
        v = View(self.buf, self.dt, ((max(rows, parts), stride, is_p),) + self.dims[1:],
                 self.part, self.off, self.checks)[(first,) + tuple(key[1:])]
        checks = [c for c in v.checks if c[4] != 0]  # the index's rows are checked by the DMA
        return View(v.buf, v.dt, v.dims, v.part, v.off, checks,
                    Indirect(idx, rows, stride * self.itemsize))

    @staticmethod
    def _shift(part, off, i, stride, is_p, item):
        if is_p:
            return part + i * stride, off
        return part, off + i * stride * item

    def __setitem__(self, key, value):
        temporary = sys.getrefcount(value) <= _TEMP_SET  # before value is an argument again
        current("tensor assignment").assign(self[key], value, temporary)

    def __iadd__(self, other):
        temporary = sys.getrefcount(other) <= _TEMP_IADD
        current("+=").accumulate(self, other, temporary)
        return self

    def cut(self, mask: Mask | bool | None) -> View:
        """The view restricted to the positions ``mask`` keeps (its axes beyond this view's
        rank do not apply). A mask that is a Python bool (a comparison of loop indices,
        which the tracer knows) keeps the view whole: False drops the instruction instead
        (:func:`dropped`)."""
        if mask is None or isinstance(mask, bool):
            return self
        if not isinstance(mask, Mask):
            raise NotSupported("a mask comparing an expression over several index axes "
                               "(positions that are not a box of index ranges)",
                               "comparisons of one index axis with an integer, joined by &")
        if self.index is not None and not self.index.scalar and 0 in mask.ranges:
            lo, hi = mask.ranges[0]
            lo, hi = max(0, lo), min(self.dims[0][0], hi)
            ind = self.index
            cut = View(self.buf, self.dt, self.dims, self.part, self.off, self.checks)
            cut = cut.cut(Mask({0: (lo, hi)}))
            return View(cut.buf, cut.dt, cut.dims, cut.part, cut.off, cut.checks,
                        Indirect(ind.tile[lo:hi], ind.rows, ind.row_bytes)).cut(
                Mask({a: r for a, r in mask.ranges.items() if a != 0}))
        dims, part, off, checks = list(self.dims), self.part, self.off, \
            [list(c) for c in self.checks]
        for axis, (lo, hi) in mask.ranges.items():
            if axis >= len(dims):
                continue
            size, stride, is_p = dims[axis]
            lo, hi = max(0, lo), min(size, hi)
            part, off = self._shift(part, off, lo, stride, is_p, self.itemsize)
            dims[axis] = (max(0, hi - lo), stride, is_p)
            for c in checks:
                if c[0] == axis:
                    c[1] += c[2] * lo
        return self._with(dims, part, off, [tuple(c) for c in checks])

    def check_bounds(self) -> None:
        for axis, first, step, limit, dim, name in self.checks:
            if axis is None:  # a pattern past its tile (.ap), refused where it is used
                raise NkiError(name)
            n = self.dims[axis][0]
            if n == 0:
                continue
            last = first + step * (n - 1)
            lo, hi = min(first, last), max(first, last)
            if lo < 0 or hi >= limit:
                raise NkiError(f"Out-of-bound access for tensor `{name}` on dimension {dim}: "
                               f"index range [{lo}, {hi}] exceed dimension size of {limit}",
                               "err_tensor_access_out_of_bound")

    # --- views without copies -----------------------------------------------------------
    def permuted(self, order) -> View:
        """The view with its dimensions in ``order`` (each an axis of this view): a
        transpose's read of the same elements."""
        return View(self.buf, self.dt, tuple(self.dims[a] for a in order), self.part,
                    self.off, ())

    def reshape(self, shape) -> View:
        shape = tuple(_int(s) for s in (shape if isinstance(shape, (tuple, list))
                                        else (shape,)))
        if self.buf.space == "hbm":
            if not self._contiguous(self.dims):
                raise NotSupported("reshape of a strided HBM view", "reshape of a whole "
                                   "contiguous HBM tensor")
            if int(np.prod(shape)) != int(np.prod(self.shape)):
                raise NkiError(f"cannot reshape {list(self.shape)} into {list(shape)}")
            return self._with(_row_major(shape), 0, self.off, ())
        p = self.dims[0]
        if not p[2] or any(d[2] for d in self.dims[1:]) or shape[0] != p[0] \
                or not self._contiguous(self.dims[1:]):
            raise NotSupported("this reshape of an on-chip tensor",
                               "reshapes of the free dimensions of a contiguous tile that "
                               "keep its partition dimension")
        if int(np.prod(shape[1:])) != int(np.prod(self.shape[1:])):
            raise NkiError(f"cannot reshape {list(self.shape)} into {list(shape)}")
        return self._with([p] + _row_major(shape[1:]), self.part, self.off, ())

    @staticmethod
    def _contiguous(dims) -> bool:
        expect = 1
        for size, stride, _ in reversed(dims):
            if size != 1 and stride != expect:
                return False
            expect *= size
        return True

    def as_column(self) -> View:
        """An on-chip tile of one dimension, one value per partition, as the [P, 1] tile it
        is in NKI (SBUF and PSUM are two-dimensional); any other view as it is."""
        if len(self.dims) == 1 and self.buf.space != "hbm":
            return self.reshape((self.dims[0][0], 1))
        return self

    def ap(self, pattern, offset=None, scalar_offset=None, vector_offset=None,
           indirect_dim=0, dtype=None) -> View:
        """NKI 0.2's explicit access pattern: ``pattern`` [[stride, count], ...] in elements,
        outermost first, from the view's start plus ``offset`` elements (``dtype``: its
        elements read as that type, of the same size). In HBM every pair is a dimension of
        the tensor's storage; on chip the first pair is the partitions, whose stride is the
        tensor's elements per partition (its free size), and the rest are free dimensions
        within a partition. Every element must lie within the tensor's storage."""
        if scalar_offset is not None or vector_offset is not None:
            return self._ap_indirect(pattern, offset, scalar_offset, vector_offset,
                                     indirect_dim, dtype)
        if self.index is not None or self.moved is not None:
            raise NotSupported(".ap of a tensor indexed by a tile or at a run-time offset",
                               ".ap of a tensor's own view")
        v = self if dtype is None else self.view(dtype)
        pairs, shift, item = _pattern(pattern), int(offset or 0), v.itemsize
        if v.buf.space == "hbm":
            v._within_storage(pattern, shift, pairs)
            dims = [(count, stride, False) for stride, count in pairs]
            return View(v.buf, v.dt, dims, 0, v.off + shift * item)
        free = v.dims[1:]
        row = math.prod(d[0] for d in free)
        if not v.dims[0][2] or not self._contiguous(free):
            raise NotSupported(".ap of a strided on-chip view", ".ap of a whole tile")
        (pstride, parts), rest = pairs[0], pairs[1:]
        if pstride != row:
            raise NotSupported(f".ap of an on-chip tile with a partition stride of {pstride}",
                               f"the tile's elements per partition, {row}")
        part, within = v.part + shift // row, shift % row
        lo, hi = _extent(within, rest)
        checks = ()
        if part + parts > v.part + v.dims[0][0] or lo < 0 or hi >= row:
            # NKI builds such a pattern and refuses it where an instruction uses it
            # (nki-library's output_projection_tkg builds one it then skips)
            checks = ((None, 0, 0, 0, -1, f".ap({pattern!r}, offset={shift}) reaches past "
                       f"the {v.dims[0][0]} x {row} tile"),)
        dims = [(parts, 1, _P)] + [(count, stride, False) for stride, count in rest]
        return View(v.buf, v.dt, dims, part, v.off + within * item, checks)

    def _within_storage(self, pattern, shift: int, pairs, when: str = "") -> None:
        """NKI's error unless ``pairs`` from ``shift`` elements past this HBM view's start
        stay within its tensor's storage."""
        item = self.itemsize
        start = (self.off - self.buf.offset) // item
        lo, hi = (start + e for e in _extent(shift, pairs))
        if lo < 0 or (hi + 1) * item > self.buf.nbytes:
            raise NkiError(f".ap({pattern!r}, offset={shift}) of `{self.buf.name}` reaches "
                           f"elements {lo} .. {hi}{when}, outside its "
                           f"{self.buf.nbytes // item} elements")

    def _ap_indirect(self, pattern, offset, scalar_offset, vector_offset, indirect_dim,
                     dtype) -> View:
        """``.ap`` of an HBM tensor with an offset read at run time. With ``vector_offset``,
        the first pair of ``pattern`` is the partitions, partition ``p`` at the index
        ``vector_offset[p]`` times the stride of the tensor's dimension ``indirect_dim``; the
        other pairs are within the row, from ``offset`` elements. With ``scalar_offset`` (a
        [1, 1] tile), the whole pattern from ``offset`` moved by its one value times that
        stride [NKI-AP: "offset + scalar_offset * prod(A.shape[indirect_dim+1:])"]. An
        indirect DMA (:meth:`Tracer.dma`) reads or writes it."""
        if scalar_offset is not None and vector_offset is not None:
            raise NkiError(".ap takes vector_offset or scalar_offset, not both")
        if isinstance(scalar_offset, Register):  # the sequencer moves the pattern
            d = int(indirect_dim)
            if not 0 <= d < len(self.dims):
                raise NkiError(f".ap: indirect_dim {d} of a tensor of {len(self.dims)} "
                               f"dimensions")
            step = math.prod(s[0] for s in self.dims[d + 1:])
            return self.ap(pattern, int(offset or 0)
                           + scalar_offset.known(".ap(scalar_offset=)") * step, dtype=dtype)
        if self.buf.space != "hbm" or self.index is not None or self.moved is not None:
            raise NotSupported(f".ap with a run-time offset of a tensor in "
                               f"{self.buf.space.upper()}", "of an HBM tensor's own view")
        v = self if dtype is None else self.view(dtype)
        d = int(indirect_dim)
        if not 0 <= d < len(v.dims):
            raise NkiError(f".ap: indirect_dim {d} of a tensor of {len(v.dims)} dimensions")
        pairs = _pattern(pattern)
        parts = pairs[0][1]
        rows, stride = v.dims[d][0], v.dims[d][1]
        shift = int(offset or 0)
        if scalar_offset is not None:
            return v._ap_scalar(pattern, pairs, shift, scalar_offset, stride)
        if d != 0:
            raise NotSupported(f".ap with vector_offset along dimension {d}",
                               "vector_offset along dimension 0 (NKI's only), or "
                               "scalar_offset")
        # the rows an index may name: those that keep the access within the tensor's storage
        # (an index past them is the DMA's out-of-bounds case, found as it runs [NKI
        # ``dma_copy``: "out-of-bound address checking is turned on automatically during
        # execution"])
        v._within_storage(pattern, shift, pairs[1:])  # at index 0
        item = v.itemsize
        _, hi = _extent((v.off - v.buf.offset) // item + shift, pairs[1:])
        rows = (v.buf.nbytes // item - 1 - hi) // stride + 1
        inner = [(count, s, False) for s, count in pairs[1:]]
        base = View(v.buf, v.dt, [(rows, stride, False)] + inner, 0, v.off + shift * item)
        if not isinstance(vector_offset, View):
            raise NotSupported(f".ap with a run-time offset from "
                               f"{type(vector_offset).__name__}", "an on-chip tile of indices")
        return base._indirect((vector_offset[0:parts],))

    def _ap_scalar(self, pattern, pairs, shift: int, idx, stride: int,
                   limit: int | None = None) -> View:
        """:meth:`ap`'s ``pairs`` from ``shift`` elements, moved at run time by ``stride``
        elements for each unit of the [1, 1] tile ``idx``'s value: an indirect view of one
        index, whose ``rows`` are the values that keep every element within the storage
        (and below ``limit``)."""
        if not isinstance(idx, View):
            raise NotSupported(f".ap with a run-time offset from {type(idx).__name__}",
                               "a [1, 1] on-chip tile")
        if idx.buf.space == "hbm" or idx.dt not in ("int32", "uint32") \
                or int(np.prod(idx.shape)) != 1:
            raise NkiError(f"the scalar_offset of tensor `{self.buf.name}` must be an on-chip "
                           f"int32 or uint32 tile of one element, not {list(idx.shape)} "
                           f"{idx.dt} in {idx.buf.space}")
        if stride < 1:
            raise NotSupported(f".ap with scalar_offset along a dimension of stride {stride}",
                               "a dimension of positive stride")
        self._within_storage(pattern, shift, pairs)  # at index 0
        item = self.itemsize
        _, hi = _extent((self.off - self.buf.offset) // item + shift, pairs)
        rows = (self.buf.nbytes // item - 1 - hi) // stride + 1
        rows = rows if limit is None else min(rows, limit)
        dims = [(count, s, False) for s, count in pairs]
        return View(self.buf, self.dt, dims, 0, self.off + shift * item, (),
                    Indirect(idx.as_column()[0:1], rows, stride * item, scalar=True))

    # --- NKI 0.2's view methods [NKI-VIEWS] ---------------------------------------------
    def _row(self) -> int:
        """Elements a partition of an on-chip view, as :meth:`ap` counts a partition's
        stride."""
        return math.prod(d[0] for d in self.dims[1:])

    @property
    def strides(self) -> tuple[int, ...]:
        """Each dimension's step in elements of the storage (on chip, a partition's step
        is the view's elements a partition, as :meth:`ap` takes it)."""
        on_chip = self.buf.space != "hbm"
        return tuple(s * self._row() if p and on_chip else s for _, s, p in self.dims)

    @property
    def offset(self) -> int:
        """The view's first element, in elements from the storage's start."""
        if self.buf.space == "hbm":
            return (self.off - self.buf.offset) // self.itemsize
        return self.part * self._row() + self.off // self.itemsize

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def get_pattern(self) -> list[list[int]]:
        """The view's access pattern, ``[[stride, count], ...]`` outermost first."""
        return [[s, n] for s, n in zip(self.strides, self.shape, strict=True)]

    def is_contiguous(self) -> bool:
        """Whether the view covers its storage in row-major order (on chip, within a
        partition: the partition dimension is not counted)."""
        return self._contiguous(self.dims[1:] if self.buf.space != "hbm" else self.dims)

    def is_indirect(self) -> bool:
        """Whether the view is addressed at run time (a tile of indices or one index)."""
        return self.index is not None or self.moved is not None

    @property
    def _partition_fixed(self) -> bool:
        """Whether dimension 0 must stay as it is: the partitions of an on-chip tensor, or
        the rows of an HBM tensor a tile of indices names."""
        return self.buf.space != "hbm" or self.index is not None

    def _dim(self, call: str, dim, partition_ok: bool = False) -> int:
        """``dim`` as a dimension of the view, NKI's error otherwise; on chip not the
        partition dimension unless ``partition_ok``."""
        d = _int(dim)
        if d < 0:
            d += len(self.dims)
        if not 0 <= d < len(self.dims):
            raise NkiError(f"{call}: dimension {dim} of a tensor of {len(self.dims)} "
                           f"dimensions")
        if d == 0 and not partition_ok and self._partition_fixed:
            raise NkiError(f"{call}: the partition dimension (0) of an on-chip or "
                           f"row-indexed tensor stays as it is")
        return d

    def _reshaped(self, call: str, dims, mapping) -> View:
        """The view with ``dims``; ``mapping`` gives each old dimension's new position
        (None: merged or split, which a pending bounds check there refuses)."""
        checks = []
        for c in self.checks:
            if c[0] is None:
                checks.append(c)
                continue
            to = mapping.get(c[0])
            if to is None:
                raise NotSupported(f"{call} of a dimension indexed past its size",
                                   "a view whose indices are within the tensor")
            checks.append((to,) + tuple(c[1:]))
        return self._with(dims, self.part, self.off, checks)

    def permute(self, dims) -> View:
        order = tuple(_int(d) for d in dims)
        if sorted(order) != list(range(len(self.dims))):
            raise NkiError(f"permute: {list(order)} is not a permutation of "
                           f"{list(range(len(self.dims)))}")
        if order[0] != 0 and self._partition_fixed:
            raise NkiError("permute: the partition dimension (0) of an on-chip or "
                           "row-indexed tensor stays outermost")
        return self._reshaped("permute", [self.dims[a] for a in order],
                              {a: i for i, a in enumerate(order)})

    def broadcast(self, dim, size) -> View:
        d = self._dim("broadcast", dim)
        if self.dims[d][0] != 1:
            raise NkiError(f"broadcast: dimension {d} has size {self.dims[d][0]}, not 1")
        dims = list(self.dims)
        dims[d] = (_int(size), 0, False)
        return self._reshaped("broadcast", dims, {i: i for i in range(len(dims))})

    def expand_dim(self, dim) -> View:
        d = _int(dim)
        if not 0 <= d <= len(self.dims) or (d == 0 and self._partition_fixed):
            raise NkiError(f"expand_dim: position {dim} of a tensor of {len(self.dims)} "
                           f"dimensions (on chip, after the partition dimension)")
        dims = list(self.dims)
        dims.insert(d, (1, 1, False))
        return self._reshaped("expand_dim", dims,
                              {i: i + (i >= d) for i in range(len(self.dims))})

    def squeeze_dim(self, dim) -> View:
        d = self._dim("squeeze_dim", dim)
        if self.dims[d][0] != 1:
            raise NkiError(f"squeeze_dim: dimension {d} has size {self.dims[d][0]}, not 1")
        return self._reshaped("squeeze_dim", self.dims[:d] + self.dims[d + 1:],
                              {i: i - (i > d) for i in range(len(self.dims)) if i != d})

    def reshape_dim(self, dim, shape) -> View:
        shape = tuple(shape)
        d = self._dim("reshape_dim", dim, partition_ok=len(shape) == 1)
        size, stride, is_p = self.dims[d]
        sizes = [_int(n) for n in shape]
        if sizes.count(-1) == 1:
            known = math.prod(n for n in sizes if n != -1)
            sizes[sizes.index(-1)] = size // known if known and size % known == 0 else 0
        if math.prod(sizes) != size or min(sizes) < 1:
            raise NkiError(f"reshape_dim: {list(shape)} does not split dimension {d} of "
                           f"size {size}")
        split = [(n, stride * math.prod(sizes[i + 1:]), is_p) for i, n in enumerate(sizes)]
        k = len(sizes) - 1
        return self._reshaped("reshape_dim", self.dims[:d] + tuple(split) + self.dims[d + 1:],
                              {i: i + (k if i > d else 0) for i in range(len(self.dims))
                               if i != d or k == 0})

    def flatten_dims(self, start_dim, end_dim) -> View:
        a = self._dim("flatten_dims", start_dim)
        b = self._dim("flatten_dims", end_dim)
        if b < a:
            raise NkiError(f"flatten_dims: dimensions {a} .. {b}")
        group = self.dims[a:b + 1]
        kept = [d for d in group if d[0] != 1] or [group[-1]]
        for (_, s0, _), (n1, s1, _) in itertools.pairwise(kept):
            if s0 != s1 * n1:
                raise NkiError(f"flatten_dims: dimensions {a} .. {b} of {self.buf.name}"
                               f"{list(self.shape)} are not contiguous in memory")
        merged = (math.prod(n for n, _, _ in group), kept[-1][1], False)
        return self._reshaped("flatten_dims", self.dims[:a] + (merged,) + self.dims[b + 1:],
                              {i: i - (b - a if i > b else 0) for i in range(len(self.dims))
                               if not a <= i <= b or a == b})

    def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None) -> View:
        """einops-style: each entry of ``src_pattern`` names a dimension or a group of
        names (split, sizes from ``fixed_sizes``, one inferred); ``dst_pattern`` orders the
        names, a group merged (contiguous in memory)."""
        fixed = dict(fixed_sizes or {})
        src = [tuple(e) if isinstance(e, (tuple, list)) else (e,) for e in src_pattern]
        dst = [tuple(e) if isinstance(e, (tuple, list)) else (e,) for e in dst_pattern]
        names = [n for g in src for n in g]
        if len(src) != len(self.dims) or sorted(names) != sorted(n for g in dst for n in g) \
                or len(set(names)) != len(names):
            raise NkiError(f"rearrange: {src_pattern!r} -> {dst_pattern!r} of a tensor of "
                           f"shape {list(self.shape)}")
        v = self
        for d in reversed(range(len(src))):  # splits, from the last (positions hold)
            if len(src[d]) > 1:
                v = v.reshape_dim(d, [fixed.get(n, -1) for n in src[d]])
        order = [names.index(n) for g in dst for n in g]
        v = v.permute(order)
        at = 0
        for g in dst:  # merges, positions counted in the result
            if len(g) > 1:
                v = v.flatten_dims(at, at + len(g) - 1)
            at += 1
        return v

    def slice(self, dim, start, end, step=1) -> View:
        d = self._dim("slice", dim, partition_ok=True)
        start, end, step = _int(start), _int(end), _int(step)
        if not 0 <= start < end <= self.dims[d][0] or step < 1:
            raise NkiError(f"slice: {start}:{end}:{step} of dimension {d} of size "
                           f"{self.dims[d][0]}")
        return self[(slice(None),) * d + (slice(start, end, step),)]

    def select(self, dim, index) -> View:
        """Dimension ``dim`` at ``index``, the dimension removed: an integer now, or an
        int32/uint32 [1, 1] tile read at run time (HBM: a DMA at one index; on chip, a free
        dimension moved as :meth:`_dynamic` moves it)."""
        if not isinstance(index, View):
            d = self._dim("select", dim, partition_ok=True)
            return self[(slice(None),) * d + (_int(index),)]
        d = self._dim("select", dim)
        if self.is_indirect():
            raise NkiError("select: one run-time index a view (is_indirect())")
        if self.buf.space != "hbm":
            return self._dynamic((slice(None),) * d + (index,))
        size, stride, _ = self.dims[d]
        rest = [(s, n) for i, (n, s, _) in enumerate(self.dims) if i != d] or [(1, 1)]
        return self._ap_scalar(rest, rest, 0, index, stride, size)

    def vector_select(self, dim, vector_offset) -> View:
        """Rows of dimension 0 of an HBM tensor, partition ``p`` at ``vector_offset[p]``."""
        if _int(dim) != 0 or self.buf.space != "hbm":
            raise NkiError("vector_select: dimension 0 of an HBM tensor")
        if self.is_indirect():
            raise NkiError("vector_select: one run-time index a view (is_indirect())")
        return self._indirect((vector_offset,))

    def reinterpret_cast(self, dtype) -> View:
        return self.view(dtype)

    def indirect(self, index, num_elem=None):
        raise NotSupported("tensor.indirect (NeuronCore-v4's tensor indirection)",
                           "select, vector_select and .ap with scalar_offset or "
                           "vector_offset")

    def view(self, dtype) -> View:
        """The same bytes as elements of ``dtype`` (a bit cast); of another size, the
        innermost dimension (contiguous) holds as many more or fewer elements, and the other
        dimensions' strides count the new elements (each a whole number of them)."""
        dt = isa_dtype(dtype)
        new, old = DTYPES[dt][1], self.itemsize
        if new == old:
            return View(self.buf, dt, self.dims, self.part, self.off, self.checks)
        on_chip = self.buf.space != "hbm"
        free = [i for i, d in enumerate(self.dims) if not (on_chip and d[2])]
        refuse = NotSupported(f"viewing {self.dt} elements of {list(self.shape)} as {dt}",
                              "a type of the same size, or a view whose innermost dimension "
                              "is contiguous and holds whole elements of the new type")
        if not free or self.dims[free[-1]][1] != 1 or self.checks or self.off % new:
            raise refuse
        dims = list(self.dims)
        size, _, is_p = dims[free[-1]]  # contiguous: its bytes as elements of the new type
        if size * old % new:
            raise refuse
        dims[free[-1]] = (size * old // new, 1, is_p)
        for i in free[:-1]:  # each stride's bytes as elements of the new type
            size, stride, is_p = dims[i]
            if stride * old % new:
                raise refuse
            dims[i] = (size, stride * old // new, is_p)
        return View(self.buf, dt, dims, self.part, self.off)

    def broadcast_to(self, shape) -> View:
        """Size-1 free dimensions broadcast by a stride of 0; a one-partition tile
        broadcast across partitions by the tensor engine
        (:func:`~kernels.nki.lower.partition_broadcast`)."""
        shape = tuple(_int(s) for s in shape)
        if len(shape) == 2 and self.as_column() is not self:
            return self.as_column().broadcast_to(shape)
        if len(shape) != len(self.dims):
            raise NotSupported("broadcast_to to another rank", "broadcasts of size-1 free "
                                                               "dimensions to the same rank")
        if self.dims and self.dims[0][2] and self.dims[0][0] == 1 != shape[0] \
                and self.buf.space != "hbm":
            from . import lower

            again = lower.iota_again(self, shape[0])
            if again is not None:
                return again.broadcast_to(shape)
            one = self.broadcast_to((1,) + shape[1:])
            return lower.partition_broadcast(one, shape[0])
        dims = []
        for (size, stride, is_p), want in zip(self.dims, shape, strict=True):
            if size == want:
                dims.append((size, stride, is_p))
            elif size == 1 and not is_p:
                dims.append((want, 0, is_p))
            else:
                raise NotSupported(f"broadcast_to {list(shape)} from {list(self.shape)}",
                                   "broadcasts of size-1 free dimensions and of a "
                                   "one-partition tile across partitions")
        return self._with(dims, self.part, self.off, self.checks)

    @property
    def T(self):
        raise NotSupported("tensor.T", "nl.transpose and nisa.nc_transpose")

    # --- arithmetic through nl ---------------------------------------------------------
    def _nl(self):
        from . import language

        return language

    def __add__(self, o):
        if isinstance(o, (Index, Affine)):
            return Dynamic(self, Affine.of(o))
        return self._nl().add(self, o)

    def __radd__(self, o):
        if isinstance(o, (Index, Affine)):
            return Dynamic(self, Affine.of(o))
        return self._nl().add(o, self)

    def __sub__(self, o):
        return self._nl().subtract(self, o)

    def __rsub__(self, o):
        return self._nl().subtract(o, self)

    def __mul__(self, o):
        return self._nl().multiply(self, o)

    def __rmul__(self, o):
        return self._nl().multiply(o, self)

    def __truediv__(self, o):
        return self._nl().divide(self, o)

    def __rtruediv__(self, o):
        return self._nl().divide(o, self)

    def __neg__(self):
        return self._nl().negative(self)


class Placed(_Typed):
    """An on-chip tensor of tiles (its block dimensions) placed one by one: by the kernel
    (:mod:`kernels.nki.compiler`; ``place`` the placement's function) or, with ``place``
    None, each allocated by its own liveness (a PSUM tensor's blocks, as NKI allocates
    them). Indexing takes one integer per block dimension first, then indexes that block's
    tile, a :class:`View`; ``fill`` (a value, or None) fills each tile before its first
    use."""

    __slots__ = ("tracer", "space", "dt", "blocks", "tile_shape", "name", "place", "tiles",
                 "where", "fill")

    def __init__(self, tracer, space: str, dt: str, blocks: tuple, tile_shape: tuple,
                 name: str, place):
        self.tracer, self.space, self.dt, self.name, self.place = tracer, space, dt, name, place
        self.blocks, self.tile_shape = blocks, tile_shape
        self.tiles: dict[tuple, View] = {}
        self.where = kernel_line()
        self.fill: float | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.blocks + self.tile_shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def buffer(self) -> str:
        return self.space

    def __repr__(self):
        return f"<NKI tensor {self.name}{list(self.shape)} {self.dt} in {self.space}, by tile>"

    def __len__(self):
        return self.blocks[0]

    def block(self, idx: tuple) -> View:
        """The tile of block ``idx``."""
        view = self.tiles.get(idx)
        if view is None:
            t = self.tracer
            if self.place is None:
                view = t.on_chip(self.space, self.tile_shape, self.dt, self.name)
                view.buf.where = self.where
            else:
                view = t.place(self.space, self.tile_shape, self.dt, self.place, idx,
                               self.name, self.where)
            self.tiles[idx] = view
            if self.fill is not None:
                t.initialise(view, self.fill)
        return view

    def __getitem__(self, key) -> View:
        key = key if isinstance(key, tuple) else (key,)
        n = len(self.blocks)
        idx = []
        for d, k in enumerate(key[:n]):
            if k is Ellipsis or isinstance(k, (slice, DSlice, Index, Affine)):
                raise NotSupported(f"indexing block dimension {d} of `{self.name}` (a "
                                   f"tensor whose blocks are tiles of their own) by {k!r}",
                                   "one integer per block dimension, before the tile's "
                                   "indices")
            i = _int(k)
            if not -self.blocks[d] <= i < self.blocks[d]:
                raise NkiError(f"Out-of-bound access for tensor `{self.name}` on dimension "
                               f"{d}: index {i} exceed dimension size of {self.blocks[d]}",
                               "err_tensor_access_out_of_bound")
            idx.append(i % self.blocks[d])
        if len(idx) < n:
            raise NotSupported(f"`{self.name}` (a tensor whose blocks are tiles of their "
                               f"own) with {len(idx)} of its {n} block indices",
                               "one integer per block dimension")
        tile = self.block(tuple(idx))
        rest = key[n:]
        return tile[rest] if rest else tile

    def __setitem__(self, key, value):
        temporary = sys.getrefcount(value) <= _TEMP_SET  # as View.__setitem__ counts
        current("tensor assignment").assign(self[key], value, temporary)


def _row_major(shape):
    dims, stride = [], 1
    for size in reversed(shape):
        dims.append((size, stride, False))
        stride *= size
    dims.reverse()
    return dims


# The reference counts of a temporary value inside __setitem__ and __iadd__ (the caller's
# stack, the argument, getrefcount's own and the tracer's pending record): measured once.
class _Probe:
    pending = None

    def __setitem__(self, key, value):
        _Probe.seen = sys.getrefcount(value)

    def __iadd__(self, other):
        _Probe.seen = sys.getrefcount(other)
        return self


def _measure():
    def make():
        _Probe.pending = object()
        return _Probe.pending

    p = _Probe()
    p[0] = make()
    setter = _Probe.seen
    p += make()
    adder = _Probe.seen
    _Probe.pending = None
    return setter, adder


_TEMP_SET, _TEMP_IADD = _measure()


# --- the allocator ------------------------------------------------------------------------

class _Space:
    """Next-fit allocation of byte ranges of one partition's worth of SBUF or PSUM (every
    tensor takes its range in all partitions); ``bank`` > 0: ranges of up to a bank stay in
    one bank, larger ones start at a bank."""

    def __init__(self, size: int, align: int, bank: int = 0):
        self.size, self.align, self.bank = size, align, bank
        self.free = [(0, size)]
        self.cursor = 0
        self.used = self.high = 0

    def _fit(self, a, b, n):
        s = -(-a // self.align) * self.align
        if self.bank:
            if n <= self.bank:
                if s // self.bank != (s + n - 1) // self.bank:
                    s = -(-s // self.bank) * self.bank
            else:
                s = -(-s // self.bank) * self.bank
        return s if s + n <= b else None

    @staticmethod
    def _merged(free) -> list:
        merged: list = []
        for a, b in free:
            if merged and merged[-1][1] == a:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        return merged

    def _ranges(self, extra: tuple[int, int] | None = None, avoid=()) -> list:
        """The free ranges, with the range ``extra`` freed too, less the ranges ``avoid``."""
        if extra is None and not avoid:
            return self.free
        free = list(self.free)
        if extra is not None:
            insort(free, extra)
        ranges = self._merged(free)
        for lo, hi in avoid:
            ranges = [r for a, b in ranges for r in ((a, min(b, lo)), (max(a, hi), b))
                      if r[1] > r[0]]
        return ranges

    def fits(self, n: int, extra: tuple[int, int] | None = None, avoid=()) -> bool:
        """Whether ``n`` bytes fit in a free range, with the range ``extra`` freed too and
        the ranges ``avoid`` held."""
        n = max(n, 1)
        return any(self._fit(a, b, n) is not None for a, b in self._ranges(extra, avoid))

    def alloc(self, n: int, avoid=()) -> int | None:
        """The start of ``n`` free bytes outside the ranges ``avoid`` (next fit), now held."""
        n = max(n, 1)
        free = self._ranges(avoid=avoid)
        order = [i for i, (a, b) in enumerate(free) if b > self.cursor] + \
            [i for i, (a, b) in enumerate(free) if b <= self.cursor]
        for i in order:
            a, b = free[i]
            s = self._fit(max(a, self.cursor) if b > self.cursor and a < self.cursor
                          else a, b, n)
            if s is None and a < self.cursor < b:
                s = self._fit(a, b, n)
            if s is None:
                continue
            self.take(s, n)
            self.cursor = s + n
            return s
        return None

    def take(self, s: int, n: int) -> None:
        """Hold the range from ``s`` of ``n`` bytes (free until now)."""
        if not any(a <= s and s + n <= b for a, b in self.free):  # across adjacent ranges
            self.free = self._merged(self.free)
        for i, (a, b) in enumerate(self.free):
            if a <= s and s + n <= b:
                del self.free[i]
                for r in ((a, s), (s + n, b)):
                    if r[1] > r[0]:
                        insort(self.free, r)
                self.hold(n)
                return
        raise AssertionError(f"range {s}..{s + n} taken twice")

    def hold(self, n: int) -> None:
        """Count ``n`` bytes as held (of a range kept out of the free list's use)."""
        self.used += n
        self.high = max(self.high, self.used)

    def release(self, s: int, n: int) -> None:
        n = max(n, 1)
        self.used -= n
        insort(self.free, (s, s + n))
        merged = []
        for a, b in self.free:
            if merged and merged[-1][1] == a:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        self.free = merged


# --- the tracer ---------------------------------------------------------------------------

_CURRENT: list[Tracer] = []


class _Body:
    """The placements (``ncc`` direct allocations) made in one run of a loop's body: the
    first iteration records each (space, shape, type, placement function) in order; a later
    iteration makes the same tensors and takes the recorded placements in the same order,
    as NKI's single trace of the body makes one tensor of each."""

    def __init__(self):
        self.made: list[tuple] = []
        self.replaying, self.next = False, 0
        #: a dynamic loop's body (:class:`DynamicLoop`): the on-chip tensors its first
        #: iteration made, in order, and the next a later iteration takes
        self.tiles: list[tuple] | None = None
        self.tile = 0

    def start(self, again: bool) -> None:
        self.replaying, self.next = again, 0


class AffineLoop:
    """The iterations of an ``nl.affine_range``: while the loop runs, the tracer of the
    kernel knows which iteration an instruction is traced in (:attr:`Tracer.loops`), for
    NKI's rule that the iterations do not write the same elements."""

    def __init__(self, r: range):
        self.range = r
        self.where = kernel_line()

    def __len__(self):
        return len(self.range)

    def __getitem__(self, i):
        return self.range[i]

    def __iter__(self):
        if not _CURRENT:
            yield from self.range
            return
        t = _CURRENT[-1]
        outer = t.loops
        body = t.enter_body()
        try:
            for i in self.range:
                t.loops = (*outer, (self, i))
                body.start(i != self.range[0])
                yield i
        finally:
            t.loops = outer
            t.leave_body(body)


class SequentialLoop(AffineLoop):
    """The iterations of an ``nl.sequential_range``, in order (its tensors' dependences
    order them); the tracer knows only its body (:meth:`Tracer.enter_body`)."""

    def __iter__(self):
        if not _CURRENT:
            yield from self.range
            return
        t = _CURRENT[-1]
        body = t.enter_body()
        try:
            for i in self.range:
                body.start(i != self.range[0])
                yield i
        finally:
            t.leave_body(body)


class Register:
    """NKI's virtual register (``nisa.register_alloc``): a 32-bit value an engine sequencer
    holds. Its value is known while the kernel is traced: a constant, another register's,
    a loop's iteration, or the value a tensor holds where ``nisa.register_load`` reads it
    (:meth:`Tracer.register_load`: the program up to there run on the core simulator). It
    bounds ``nl.dynamic_range`` and ``nl.fori_loop``, is ``while``'s condition, and moves an
    access pattern (``.ap(scalar_offset=)``); Python cannot take it as an integer, as the
    hardware's sequencer alone reads it."""

    __slots__ = ("value",)

    def __init__(self, value: int | None = None):
        self.value = None if value is None else _register_word(value)

    def known(self, call: str) -> int:
        if self.value is None:
            raise NkiError(f"{call}: a register read before it holds a value (register_alloc() "
                           f"without one, and no register_load or register_move since)")
        return self.value

    def __bool__(self):
        return self.known("while on a register") != 0

    def __index__(self):
        raise NotSupported("a register used as a Python integer (its value is the "
                           "sequencer's, at run time)", "nl.dynamic_range or nl.fori_loop "
                           "over it, .ap(scalar_offset=) by it, or nisa.register_store of it")

    __int__ = __index__

    def __repr__(self):
        return f"Register({self.value})"


def _register_word(value) -> int:
    """``value`` as a register holds it: a signed 32-bit integer."""
    v = int(value) & 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


class DynamicLoop(SequentialLoop):
    """The iterations of ``nl.dynamic_range`` (``nl.fori_loop``, ``nl.while_loop``): a loop
    the sequencers run on registers, its count known while tracing (:class:`Register`). Its
    body is one stretch of code run again: the on-chip tensors it makes are the first
    iteration's in every later one (:meth:`Tracer.on_chip`), so iterations overlap only as
    far as the one set of tensors lets them; each iteration's register is yielded."""

    def __iter__(self):
        t = current("nl.dynamic_range")
        body = t.enter_body()
        body.tiles = []
        starts = []
        try:
            for n, i in enumerate(self.range):
                body.start(n != 0)
                body.tile = 0
                t.commit()
                starts.append(len(t.nodes))
                yield Register(i)
        finally:
            t.commit()
            t.leave_body(body)
            if starts:
                t.dynamic_bodies.append(([buf for _, buf in body.tiles], starts,
                                         len(t.nodes)))


def tracing() -> bool:
    """Whether a kernel is being traced (an NKI call now is part of its program)."""
    return bool(_CURRENT)


def current(call: str) -> Tracer:
    """The tracer of the kernel being traced; outside a kernel, NKI's error."""
    if not _CURRENT:
        raise NkiError(f"{call} is an NKI API called outside of an NKI kernel",
                       "err_nki_api_outside_of_nki_kernel")
    return _CURRENT[-1]


class _Pending:
    """An op's result not yet emitted: ``make(dst, accumulate)`` emits it, as of the loop
    iterations and the kernel's line (``where``) it was made at."""

    __slots__ = ("view", "make", "kind", "mask", "loops", "where")

    def __init__(self, view, make, kind, mask, loops, where):
        self.view, self.make, self.kind, self.mask = view, make, kind, mask
        self.loops, self.where = loops, where


class Tracer:
    """Traces one kernel launch into a program for a core of ``params``."""

    def __init__(self, params: CoreParams, spill: bool = True):
        self.params = params
        self.builder = Builder(params)
        self.nodes: list[_Node] = []
        self.spaces = {"sbuf": _Space(params.sbuf_bytes, SBUF_ALIGN),
                       "psum": _Space(params.psum_bytes, PSUM_ALIGN, params.psum_bank_bytes)}
        #: freed ranges and the accesses that used them: (start, end, order, nodes), sorted
        self.on_chip_buffers: list[Buffer] = []  # in order of creation
        #: the buffers of the tiles the kernel places itself, by (space, offset)
        self.physical: dict[tuple[str, int], Buffer] = {}
        #: whether the kernel's placements are ignored (``@ncc.force_auto_alloc``)
        self.auto_alloc = False
        #: the NKI the kernel is written in: 1 (``neuronxcc.nki``) or 2 (``nki``)
        self.generation = 1
        self._allocated = False
        self.retired: dict[str, list[tuple]] = {"sbuf": [], "psum": []}
        self._widest = {"sbuf": 0, "psum": 0}
        self._retired = 0
        #: whether a buffer that does not fit in SBUF spills a live one to HBM
        #: (:meth:`allocate`); the spills made, their bytes per partition, and the buffer
        #: that made the first: (kernel line, tensor, bytes per partition)
        self.spill = spill
        self.spills = self.spilled_bytes = 0
        self.first_spill: tuple[str, str, int] | None = None
        self._inserted = 0
        self._uses: dict[int, list[_Node]] = {}
        self.pending: _Pending | None = None
        self._queue = 0
        self._names: dict[str, int] = {}
        self.program_id: tuple[int, ...] = ()
        self.grid: tuple[int, ...] = ()
        self.cores = 1  # the physical NeuronCores the launch's grid runs on (nl.nc)
        #: where the cores meet (``nisa.core_barrier``, ``nisa.sendrecv``): (instructions
        #: traced before, the kernel's line, the exchange: None or (src access pattern, its
        #: buffer, dst access pattern, its buffer, the rank sent to, the rank received from))
        self.boundaries: list[tuple[int, str, tuple | None]] = []
        self.shared: list[View] = []  # shared_hbm tensors, by order of creation
        self.constants: list[tuple] = []  # (HBM tensor, data) of nl.shared_constant
        self.prints: list[tuple[str, View]] = []  # (prefix, HBM copy) of nl.device_print
        #: on-chip constants the lowering makes once and reuses (the ones of a partition
        #: broadcast), by (what, partitions, format)
        self.constant_tiles: dict[tuple, View] = {}
        #: the reduction register of an engine that chained instructions accumulate into
        #: (``reduce_cmd``), by engine: the [P, 1] fp32 tile holding it
        self.registers: dict[str, View] = {}
        # tiles an nisa.iota made: buffer -> (its expression, its writes then)
        self.iota_tiles: dict = {}
        self._shared_next = 0
        self.matmul_dtypes: set[str] = set()
        #: the iterations of the nl.affine_range loops being traced, outermost first:
        #: (loop, iteration) pairs, a loop being its :class:`AffineLoop`
        self.loops: tuple = ()
        #: the bodies of the affine and sequential loops being traced, outermost first
        self.bodies: list[_Body] = []
        #: each nl.dynamic_range loop's tensors (its first iteration's), the instruction
        #: each iteration starts at, and the one after its last (:meth:`_body_groups`)
        self.dynamic_bodies: list[tuple[list, list[int], int]] = []
        #: the kernel's line of each instruction of the program, by (stream, index), and
        #: the line of the pending result being emitted (else the line tracing now)
        self.lines: dict[tuple[str, int], str] = {}
        #: of each phase's program (:meth:`programs`): (stream, index) -> the kernel's line
        self.phase_lines: list[dict[tuple[str, int], str]] = []
        #: each register load's value and kernel line, in order (:meth:`register_load`)
        self.register_values: list[int] = []
        self.register_lines: list[str] = []
        #: the byte ranges of the HBM tensors the kernel made private to each core
        #: (``nl.hbm``, ``nl.private_hbm``)
        self.private: list[tuple[int, int]] = []
        self.making: str | None = None
        self.merged = 0  # instructions :meth:`merge_repeats` dropped
        #: what runs the program traced so far and returns the bytes of an access pattern
        #: (``(tracer, view) -> np.ndarray``; set by a launch with the kernel's inputs): how
        #: :meth:`register_load` learns a register's value
        self.oracle = None
        #: the registers loaded from tensors: (the instructions that wrote the value, the
        #: streams whose sequencer has loaded it since), each stream's next instruction
        #: waiting for those writers
        self.gates: list[tuple[list[_Node], set]] = []

    def __enter__(self):
        _CURRENT.append(self)
        return self

    def __exit__(self, *exc):
        _CURRENT.remove(self)
        if exc[0] is None:
            self.commit()
        else:
            self.pending = None

    # --- tensors ------------------------------------------------------------------------
    def _name(self, base: str) -> str:
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def hbm(self, name: str, shape, dt: str, shared: bool = False) -> View:
        if shared and self.program_id and any(self.program_id):
            if self._shared_next < len(self.shared):
                v = self.shared[self._shared_next]
                self._shared_next += 1
                return v
        t = self.builder.hbm(self._name(name), shape, dt)
        buf = Buffer("hbm", t.name, t.offset, t.nbytes, hbm=t)
        v = View(buf, dt, _row_major(t.shape), 0, t.offset)
        if shared:
            self.shared.append(v)
            self._shared_next = len(self.shared)
        return v

    def constant(self, data: np.ndarray, dt: str) -> View:
        """An HBM tensor holding ``data`` cast to ``dt``, written into HBM before a numeric
        launch runs."""
        v = self.hbm("const", data.shape, dt)
        self.constants.append((v.buf.hbm, data.astype(numpy_dtype(dt))))
        return v

    def on_chip(self, space: str, shape, dt: str, name: str, par: int = 0) -> View:
        """A new SBUF or PSUM tensor of ``shape``, dimension ``par`` its partitions (the
        ones before it block dimensions, each block its own tile)."""
        p = self.params
        shape = tuple(_int(s) for s in shape)
        if not shape:
            raise NkiError("an on-chip tensor needs a partition dimension")
        if shape[par] > p.partitions:
            raise NkiError(f"number of partitions {shape[par]} exceed architecture "
                           f"limitation of {p.partitions}", "err_num_partition_exceed_arch_"
                                                            "limit")
        item = DTYPES[dt][1]
        tile = math.prod(shape[par + 1:]) * item
        blocks = math.prod(shape[:par])
        stride = tile
        if space == "psum":
            bank = p.psum_bank_bytes
            if tile > bank:
                raise NkiError(f"a PSUM tile of {list(shape[par:])} {dt} takes {tile} bytes "
                               f"per partition, above one {bank}-byte PSUM bank (psum_fmax: "
                               f"{bank // 4} fp32)", "err_size_of_dimension_exceed_arch_"
                                                     "limit")
            if blocks > 1:  # each block in one bank
                stride = 1 << max(0, (tile - 1).bit_length())
                stride = -(-stride // PSUM_ALIGN) * PSUM_ALIGN
        nbytes = max(blocks * stride, item)
        made = (space, shape, dt, par)
        loop = next((b for b in reversed(self.bodies) if b.tiles is not None), None)
        if loop is not None and loop.replaying:
            if loop.tile >= len(loop.tiles) or loop.tiles[loop.tile][0] != made:
                raise NkiError(f"a later iteration of an nl.dynamic_range loop makes the "
                               f"{space.upper()} tensor {list(shape)} {dt} where the first "
                               f"made " + (f"{list(loop.tiles[loop.tile][0][1])} "
                                           f"{loop.tiles[loop.tile][0][2]}"
                                           if loop.tile < len(loop.tiles) else "none")
                               + ": the loop's body is one stretch of code, its tensors the "
                               "same every iteration")
            buf = loop.tiles[loop.tile][1]
            loop.tile += 1
        else:
            buf = Buffer(space, self._name(name), 0, nbytes, where=kernel_line(),
                         what=f"{list(shape)} {dt}")
            self.on_chip_buffers.append(buf)
            if loop is not None:
                loop.tiles.append((made, buf))
        dims = []
        bstride = stride // item
        for size in reversed(shape[:par]):
            dims.append((size, bstride, _F))
            bstride *= size
        dims.reverse()
        dims.append((shape[par], 1, _P))
        dims += _row_major(shape[par + 1:])
        return View(buf, dt, dims, 0, 0)

    def enter_body(self) -> _Body:
        """A loop's body begins to be traced (its iterations follow)."""
        self.bodies.append(_Body())
        return self.bodies[-1]

    def leave_body(self, body: _Body) -> None:
        self.bodies.remove(body)

    def _as_traced_once(self, space: str, shape: tuple, dt: str, place):
        """The placement function a tensor the kernel places takes: in a later iteration of
        a loop (the outermost such), the one the first iteration's tensor at the same place
        in the body's order took, since the NKI whose direct allocation this is
        (``neuronxcc.nki.compiler``) traces an ``affine_range`` or ``sequential_range`` body
        once and makes one tensor of each such line (a body that adds to an address moves it
        once, not every iteration); else ``place``. Every body being recorded keeps it.
        (NKI 0.2's loops unroll like ``range``: each of its placements,
        ``nl.ndarray(address=)``, is its own tensor, not passed through here.)"""
        made = (space, shape, dt)
        source = next((b for b in self.bodies if b.replaying), None)
        if source is not None:
            if source.next >= len(source.made) or source.made[source.next][0] != made:
                raise NkiError(
                    f"a later iteration of a loop makes {'an' if space == 'sbuf' else 'a'} "
                    f"{space.upper()} tensor {shape} of "
                    f"{dt} where the first made "
                    + (f"{source.made[source.next][0][1]} of {source.made[source.next][0][2]}"
                       if source.next < len(source.made) else "none")
                    + "; NKI traces a loop's body once, so every iteration makes the same "
                    "tensors")
            place = source.made[source.next][1]
            source.next += 1
        for body in self.bodies:
            if not body.replaying:
                body.made.append((made, place))
        return place

    def placed(self, space: str, shape, dt: str, name: str, par: int, place,
               traced_once: bool = True) -> View | Placed:
        """A new SBUF or PSUM tensor of ``shape`` that the kernel places by ``place`` (a
        :class:`~kernels.nki.compiler.Placement`'s function): a :class:`View` of its one tile
        without block dimensions, else a :class:`Placed` tensor of its blocks. Inside a
        loop, as NKI 0.1's one trace of its body places it (:meth:`_as_traced_once`), unless
        not ``traced_once`` (NKI 0.2, whose loops unroll)."""
        p = self.params
        shape = tuple(_int(s) for s in shape)
        if traced_once:
            place = self._as_traced_once(space, shape, dt, place)
        if not shape or shape[par] > p.partitions or (
                space == "psum" and math.prod(shape[par + 1:]) * DTYPES[dt][1]
                > p.psum_bank_bytes):
            self.on_chip(space, shape, dt, name, par)  # NKI's error for the shape
        blocks, tile = shape[:par], shape[par:]
        if not blocks:
            return self.place(space, tile, dt, place, (), name, kernel_line())
        placed = Placed(self, space, dt, blocks, tile, self._name(name), place)
        for idx in itertools.product(*map(range, blocks)):  # every block checked here
            self.locate(space, tile, dt, place, idx, placed.name, placed.where)
        return placed

    def blocked(self, space: str, shape, dt: str, name: str, par: int) -> Placed:
        """A new on-chip tensor whose blocks (the dimensions before ``par``) are allocated
        each by its own liveness."""
        shape = tuple(_int(s) for s in shape)
        if shape[par] > self.params.partitions:
            self.on_chip(space, shape, dt, name, par)  # NKI's error for the shape
        return Placed(self, space, dt, shape[:par], shape[par:], self._name(name), None)

    def _physical(self, space: str, offset: int, nbytes: int) -> Buffer:
        """The buffer of the placed tiles of ``space`` from ``offset`` (one per PSUM bank,
        one for SBUF from 0), grown to ``nbytes``."""
        buf = self.physical.get((space, offset))
        if buf is None:
            buf = self.physical[space, offset] = Buffer(
                space, f"{space} placed by the kernel", offset, nbytes,
                what=f"the tiles the kernel places in {space.upper()} from byte {offset}")
            buf.fixed = True
            self.on_chip_buffers.append(buf)
        buf.nbytes = max(buf.nbytes, nbytes)
        return buf

    def place(self, space: str, tile: tuple, dt: str, place, idx: tuple, name: str,
              where: str) -> View:
        """The tile ``tile`` of block ``idx`` where ``place`` puts it (:meth:`locate`)."""
        base, part, byte, nbytes = self.locate(space, tile, dt, place, idx, name, where)
        buf = self._physical(space, base, byte + nbytes)
        fp = (part, part + tile[0], byte, byte + nbytes)
        buf.claims = [c for c in buf.claims if not _contains(fp, c[0], False)]
        buf.claims.append((fp, len(self.nodes)))
        buf.placings.append((fp, len(self.nodes)))
        dims = [(tile[0], 1, _P), *_row_major(tile[1:])]
        return View(buf, dt, dims, part, byte)

    def locate(self, space: str, tile: tuple, dt: str, place, idx: tuple, name: str,
               where: str) -> tuple[int, int, int, int]:
        """(the byte its memory's placed buffer starts at, start partition, byte, bytes per
        partition) of the tile ``tile`` of block ``idx`` where ``place`` puts it, checked
        against the memory (NKI's errors at ``where``, the line that made the tensor)."""
        p = self.params
        item = DTYPES[dt][1]
        parts, nbytes = tile[0], math.prod(tile[1:]) * item
        try:
            at = tuple(int(v) for v in place(idx=idx, pdim_size=parts, fdim_size=nbytes))
        except (TypeError, ValueError) as e:
            raise NkiError(f"the placement of `{name}` block {idx}: {e}", where=where) from e
        if space == "psum":
            if len(at) != 3:
                raise NkiError(f"a PSUM placement gives (bank, start partition, byte), not "
                               f"{at} for `{name}` block {idx}", where=where)
            bank, part, byte = at
            banks = p.psum_bytes // p.psum_bank_bytes
            if not 0 <= bank < banks:
                raise NkiError(f"`{name}` block {idx} is placed in PSUM bank {bank}; the core "
                               f"has banks 0 to {banks - 1}", where=where)
            base, limit = bank * p.psum_bank_bytes, p.psum_bank_bytes
        else:
            if len(at) != 2:
                raise NkiError(f"an SBUF placement gives (start partition, byte), not {at} "
                               f"for `{name}` block {idx}", where=where)
            part, byte = at
            base, limit = 0, p.sbuf_bytes
        if byte < 0 or byte + nbytes > limit:
            room = "one PSUM bank" if space == "psum" else "an SBUF partition"
            raise NkiError(f"`{name}` block {idx} is placed at byte {byte} with {nbytes} "
                           f"bytes per partition, past the {limit} bytes of {room}",
                           where=where)
        if part < 0 or part + parts > p.partitions:
            raise NkiError(f"`{name}` block {idx} is placed at partitions {part} to "
                           f"{part + parts - 1}; the core has {p.partitions}", where=where)
        if byte % item:
            raise NkiError(f"`{name}` block {idx} is placed at byte {byte}, not a multiple "
                           f"of its {item}-byte elements", where=where)
        return base, part, byte, nbytes

    @staticmethod
    def written(view: View, ap: AP) -> bool:
        """Whether the tensor of ``view`` has had elements of ``ap`` written (of a placed
        tile, since its tensor took the space)."""
        return next(Tracer._writes_since_claim(view, ap), None) is not None

    @staticmethod
    def _writes_since_claim(view: View, ap: AP):
        """The writes of elements of ``ap`` into the buffer of ``view`` since its tensor took
        the space (a placed tile's buffer is every tile placed there: earlier tensors'
        writes are not this one's)."""
        fp = footprint(ap)
        buf = view.buf
        since = max((i for f, i in buf.claims if overlaps(f, fp, False)), default=0)
        return (r for r in buf.writes if r.writer is not None and r.writer.index >= since
                and overlaps(r.fp, fp, False))

    @staticmethod
    def accumulating(view: View, ap: AP) -> bool:
        """Whether a matmul into ``ap`` of PSUM tensor ``view`` accumulates where the kernel
        leaves it to the compiler (NKI 0.2's ``accumulate=None``: "first write overwrites,
        subsequent writes accumulate"): its elements have been written (:meth:`written`)
        and no instruction but the tensor engine's has read them since. A result another
        engine read has ended its accumulation: the next matmul there starts one, as a
        PSUM tile reused in a loop needs (attention_cte's, a tensor for each group at one
        bank)."""
        writes = list(Tracer._writes_since_claim(view, ap))
        return bool(writes) and not any(x.stream != "tensor" for r in writes
                                        for x in r.readers.values())

    def tile(self, shape, dt: str, space: str = "sbuf", name: str = "tile",
             part: int = 0) -> View:
        v = self.on_chip(space, shape, dt, name)
        if part:
            v = View(v.buf, v.dt, v.dims, part, v.off)
        return v

    # --- repeated computations ----------------------------------------------------------
    def merge_repeats(self) -> None:
        """Compute a repeated value once, as a compiler that unrolls the kernel's loops does
        (value numbering): an instruction of a compute engine that repeats an earlier one
        of the same engine (the same operation on the same elements of the same tiles, none
        written in between) into a tile of the same layout is dropped, when each of the two
        tiles is written by its instruction alone; readers of the dropped one's tile read
        the earlier tile, which stays live until they have run. DMA transfers are not merged
        (the Mamba tutorial's v1 reloads the inputs its loop reloads), nor matmuls (the
        array's state), nor what draws from the generators (stochastic rounding, random
        numbers, dropout: the generators advance).
        The count is :attr:`merged`."""
        results = {id(n): {f for f, _, w in n.ins.operands() if w} for n in self.nodes}
        writers: dict[int, int] = {}  # on-chip buffer -> instructions that write it
        for node in self.nodes:
            for name, buf in node.moved:
                if name in results[id(node)]:
                    writers[id(buf)] = writers.get(id(buf), 0) + 1
        version: dict[int, int] = {}  # buffer -> writes so far, in program order
        seen: dict[tuple, tuple[_Node, Buffer]] = {}
        gone: dict[int, _Node] = {}  # dropped node -> the node before it in its stream
        into: dict[int, Buffer] = {}  # dropped node's tile -> the tile that holds its value
        before: dict[str, _Node] = {}  # each stream's last kept node
        keep = []
        for node in self.nodes:
            if into:
                node.moved = tuple((f, into.get(id(b), b)) for f, b in node.moved)
            out = results[id(node)]
            written = [(f, b) for f, b in node.moved if f in out]
            key = None
            if node.stream in _COMPUTE and len(written) == 1 \
                    and not draws_random(node.ins):
                dst = written[0][1]
                if writers.get(id(dst)) == 1 and not dst.fixed:
                    key = (node.stream, node.ins, dst.space, dst.nbytes,
                           tuple((f, id(b), version.get(id(b), 0)) for f, b in node.moved
                                 if f not in out))
            have = seen.get(key) if key is not None else None
            if have is not None:
                gone[id(node)] = before[node.stream]
                into[id(written[0][1])] = have[1]
                continue
            if key is not None:
                seen[key] = (node, written[0][1])
            for _, b in written:
                version[id(b)] = version.get(id(b), 0) + 1
            if gone:
                node.deps = tuple(gone.get(id(d), d) for d in node.deps)
            before[node.stream] = node
            keep.append(node)
        self.merged = len(self.nodes) - len(keep)
        if not self.merged:
            return
        self.nodes = keep
        for buf in self.on_chip_buffers:
            buf.first = buf.last = -1
            buf.latest = {}
            buf.written = [(n, fp) for n, fp in buf.written if id(n) not in gone]
        for node in keep:
            for _, buf in node.moved:
                buf.touch(node)

    # --- allocation by liveness ---------------------------------------------------------
    def allocate(self) -> None:
        """Give every on-chip buffer its offset, as NKI's compiler allocates: a buffer is
        live from the first to the last instruction (in program order) that touches it, and
        its range is free after that. Buffers are placed in the order of their first use,
        next-fit, so that the tiles of successive loop iterations land on fresh space while
        there is room (double buffering). A write into a range that dead tensors held waits
        for their last accesses.

        A buffer that does not fit in SBUF makes room by spilling (with :attr:`spill`): of
        the live SBUF tensors that its first instruction does not touch, the one used again
        latest (preferring one whose range alone makes room) is copied to an HBM tensor of
        its own after its last use before that instruction, and copied back, into a new
        placement, before its next use; every later access waits for the copy back. When no
        live tensor can make room (every one is touched by that instruction), or with
        spilling off, or in PSUM, it is NKI's out-of-memory error at the kernel line that
        made the buffer."""
        if self._allocated:
            return
        self._allocated = True
        self.merge_repeats()
        uses: dict[int, list[_Node]] = {}
        for node in self.nodes:
            for _, buf in node.moved:
                have = uses.setdefault(id(buf), [])
                if not have or have[-1] is not node:
                    have.append(node)
        self._uses = uses
        # the tiles the kernel placed hold their buffer's range while they live
        # (:meth:`_placed_lives`); a tensor allocated here keeps out of those whose lives
        # meet its own
        holds = [_Hold(b, lo, hi) for b in self.on_chip_buffers if b.fixed and b.first >= 0
                 for lo, hi in self._placed_lives(b)]
        groups = self._body_groups()
        grouped = {id(b) for _, members in groups for b, _ in members}
        self._groups = {id(g) for g, _ in groups}  # never spilled: their tensors move
        live = sorted([*(b for b in self.on_chip_buffers if b.first >= 0 and not b.fixed
                         and id(b) not in grouped),
                       *(g for g, _ in groups), *holds],
                      key=lambda b: b.first)  # stable: ties in creation order
        todo = [(b.first, order, b) for order, b in enumerate(live)]
        heapify(todo)
        order = len(todo)
        ends: list = []  # (last instruction, order, buffer) of the placed buffers
        placed: dict[int, Buffer] = {}  # the live placed buffers (a spilled one leaves)
        spilled = False
        while todo:
            first, key, buf = heappop(todo)
            while ends and ends[0][0] < first:
                done = heappop(ends)[2]
                if isinstance(done, _Hold):
                    self._release(done.buf, self._uses_within(done))
                elif placed.pop(id(done), None) is not None:
                    self._release(done)
            if isinstance(buf, _Hold):
                self.spaces[buf.buf.space].hold(buf.buf.nbytes)
                self._after_retired(buf.buf, buf)
                heappush(ends, (buf.last, key, buf))
                continue
            space = self.spaces[buf.space]
            avoid = [(h.buf.offset, h.buf.offset + h.buf.nbytes) for h in holds
                     if h.buf.space == buf.space and h.first <= buf.last
                     and buf.first <= h.last]
            while not space.fits(buf.nbytes, avoid=avoid):
                victim = self._victim(buf, placed, avoid) if self.spill else None
                if victim is None:
                    raise NkiError(f"{buf.space.upper()} full: tensor {buf.name} {buf.what} "
                                   f"needs {buf.nbytes} bytes per partition; {space.used} of "
                                   f"{space.size} are held by live tensors (largest free "
                                   f"range {max((b - a for a, b in space.free), default=0)})",
                                   where=buf.where)
                if not self.spills:
                    self.first_spill = (buf.where, f"{buf.name} {buf.what}", buf.nbytes)
                del placed[id(victim)]
                back = self._spill(victim, first)
                order += 1
                heappush(todo, (back.first, order, back))
                spilled = True
            self._place(buf, avoid)
            placed[id(buf)] = buf
            heappush(ends, (buf.last, key, buf))
        for group, members in groups:
            for b, rel in members:
                b.offset = group.offset + rel
        if spilled:
            self.nodes.sort(key=lambda n: n.index)

    def _victim(self, buf: Buffer, placed: dict, avoid=()) -> Buffer | None:
        """The live SBUF tensor to spill so that ``buf`` fits (see :meth:`allocate`)."""
        if buf.space != "sbuf":
            return None
        space, now = self.spaces["sbuf"], buf.first
        best, best_key = None, None
        for v in placed.values():
            if v.space != "sbuf" or id(v) in self._groups:
                continue
            use = self._uses[id(v)]
            i = bisect_left([n.index for n in use], now)
            if i == 0 or i == len(use) or use[i].index == now:
                continue  # touched by the instruction that needs the room
            key = (space.fits(buf.nbytes, (v.offset, v.offset + v.nbytes), avoid), use[i].index,
                   v.nbytes)
            if best_key is None or key > best_key:
                best, best_key = v, key
        return best

    def _spill(self, buf: Buffer, now: float) -> Buffer:
        """Copy ``buf`` to an HBM tensor after its last use before instruction ``now``,
        free its range, and return the buffer that holds it again from just before its next
        use (to be placed), the later accesses moved to it."""
        use = self._uses.pop(id(buf))
        i = bisect_left([n.index for n in use], now)
        before, after = use[:i], use[i:]
        n = buf.nbytes
        item = 4 if n % 4 == 0 else 2 if n % 2 == 0 else 1
        dt = {4: "uint32", 2: "bf16", 1: "uint8"}[item]
        count = n // item
        parts = self.params.partitions
        hbm = self.builder.hbm(self._name(f"{buf.name}_spill"), (parts, count), dt)
        back = Buffer("sbuf", buf.name, 0, n, where=buf.where, what=buf.what)
        back.last = buf.last
        stores, loads = [], []
        step = (1 << 16) - 1  # elements of one access pattern's dimension
        for first in range(0, count, step):
            size = min(step, count - first)
            on = AP("sbuf", dt, 0, parts, first * item, ((size, 1),))
            off = AP("hbm", dt, 0, parts, hbm.offset + first * item, ((size, 1),), n)
            # strictly between the last use before and ``now``, and between ``now`` and the
            # next use: distinct for every copy, in the order they are made
            self._inserted += 1
            tilt = 1e-3 * (1 + 1e-9 * self._inserted)
            lo, hi = before[-1].index, after[0].index
            store = _Node(self.dma_queue(), DmaCopy(dst=off, src=on), lo + (now - lo) * tilt)
            store.moved = (("src", buf),)
            _wait_for(store, _latest(before).values())
            stores.append(store)
            load = _Node(self.dma_queue(), DmaCopy(dst=on, src=off), hi - (hi - now) * tilt)
            load.moved = (("dst", back),)
            loads.append(load)
        for load in loads:
            _wait_for(load, stores)
            back.written.append((load, footprint(load.ins.dst)))
        for node in after:
            node.moved = tuple((f, back if b is buf else b) for f, b in node.moved)
            _wait_for(node, loads)
        back.first = min(load.index for load in loads)
        back.latest = _latest([*loads, *after])
        self._uses[id(back)] = [*loads, *after]
        buf.latest = _latest([*before, *stores])
        self._release(buf)
        self.nodes += stores + loads
        self.spills += 1
        self.spilled_bytes += n
        return back

    def _place(self, buf: Buffer, avoid=()) -> None:
        """Give ``buf`` its range, outside the ranges ``avoid``."""
        offset = self.spaces[buf.space].alloc(buf.nbytes, avoid)
        assert offset is not None, "placed without room"
        buf.offset = offset
        self._after_retired(buf)

    def _body_groups(self) -> list[tuple[Buffer, list[tuple[Buffer, int]]]]:
        """The tensors of each ``nl.dynamic_range`` body, allocated as NKI's compiler
        allocates a body it traces once: by their lives within one iteration (the first),
        each at a place within one range of the memory the loop holds from its first
        instruction to its last. That range is a buffer of its own, allocated as any
        other (returned with its tensors and their places in it); a write of a tensor of
        the body waits for every earlier access of another that shares its bytes (in this
        iteration or the one before). A tensor used outside its loop is allocated as any
        other."""
        out = []
        for bufs, starts, end in self.dynamic_bodies:
            first_end = starts[1] if len(starts) > 1 else end
            members = []
            for b in bufs:
                uses = self._uses.get(id(b), [])
                if b.fixed or not uses or uses[0].index < starts[0] \
                        or uses[-1].index >= end:
                    continue
                window = [n.index for n in uses if n.index < first_end]
                if window:
                    members.append((min(window), max(window), b))
            for space in ("sbuf", "psum"):
                mine = sorted((m for m in members if m[2].space == space),
                              key=lambda m: m[0])
                if not mine:
                    continue
                real = self.spaces[space]
                local = _Space(real.size, real.align, real.bank)
                ends: list = []
                placed = []
                for lo, hi, b in mine:
                    while ends and ends[0][0] < lo:
                        _, rel, n = heappop(ends)
                        local.release(rel, n)
                    rel = local.alloc(b.nbytes)
                    if rel is None:
                        raise NkiError(f"{space.upper()} full: the tensors an nl.dynamic_range "
                                       f"body holds at once need more than {real.size} bytes "
                                       f"per partition (tensor {b.name} {b.what})",
                                       where=b.where)
                    heappush(ends, (hi, rel, b.nbytes))
                    placed.append((b, rel))
                size = max(rel + b.nbytes for b, rel in placed)
                group = Buffer(space, f"{placed[0][0].name}_body", 0, size,
                               where=placed[0][0].where, what="an nl.dynamic_range body")
                uses = sorted({id(n): n for b, _ in placed for n in self._uses[id(b)]}
                              .values(), key=lambda n: n.index)
                self._uses[id(group)] = uses
                group.first, group.last = uses[0].index, uses[-1].index
                group.latest = _latest(uses)
                group.written = sorted(((n, (fp[0], fp[1], fp[2] + rel, fp[3] + rel))
                                        for b, rel in placed for n, fp in b.written),
                                       key=lambda w: w[0].index)
                for b, rel in placed:
                    for c, crel in placed:
                        if c is b or not (rel < crel + c.nbytes and crel < rel + b.nbytes):
                            continue
                        theirs = self._uses[id(c)]
                        at = [n.index for n in theirs]
                        for node, _ in b.written:
                            _wait_for(node, _latest(theirs[:bisect_left(at, node.index)])
                                      .values())
                out.append((group, placed))
        return out

    def _placed_lives(self, buf: Buffer) -> list[tuple[int, int]]:
        """The instructions over which the tiles the kernel placed in ``buf`` live, merged:
        each from its first to its last access before a later tile placed over it (NKI's
        placed tensors share memory by the kernel's word: a tile is the kernel's until
        another takes its bytes)."""
        touched = []
        for node in self._uses.get(id(buf), ()):
            fps = [footprint(ap) for name, ap, _ in node.ins.operands()
                   if any(f == name and b is buf for f, b in node.moved)]
            touched.append((node.index, fps))
        spans = []
        for k, (fp, at) in enumerate(buf.placings):
            end = next((a for f, a in buf.placings[k + 1:] if overlaps(f, fp, False)),
                       math.inf)
            hits = [i for i, fps in touched if at <= i < end
                    and any(overlaps(f, fp, False) for f in fps)]
            if hits:
                spans.append((min(hits), max(hits)))
        merged: list = []
        for lo, hi in sorted(spans):
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        return merged

    def _uses_within(self, hold: _Hold) -> list:
        """The instructions touching ``hold``'s buffer within its life."""
        return [n for n in self._uses.get(id(hold.buf), ())
                if hold.first <= n.index <= hold.last]

    def _after_retired(self, buf: Buffer, hold: _Hold | None = None) -> None:
        """``buf``'s writes (within ``hold``'s life, of a buffer the kernel placed) wait for
        the last accesses of the tensors that held its range before it (their ranges
        retired)."""
        # the retired ranges it overlaps, relative to it; those it covers are dropped
        lo, hi = buf.offset, buf.offset + buf.nbytes
        retired = self.retired[buf.space]
        i = bisect_left(retired, (lo - self._widest[buf.space],))
        ranges = []
        while i < len(retired) and retired[i][0] < hi:
            start, end, _, held = retired[i]
            if end > lo:
                ranges.append(((0, self.params.partitions, max(start, lo) - lo,
                                min(end, hi) - lo), held))
                if hold is None and lo <= start and end <= hi:  # a life of a placed
                    del retired[i]  # buffer may not write all of it: kept for the next
                    continue
            i += 1
        written = buf.written if hold is None else \
            [(n, fp) for n, fp in buf.written if hold.first <= n.index <= hold.last]
        for node, fp in written:
            if not ranges:
                break
            keep = []
            for rec, held in ranges:
                if overlaps(rec, fp, False):
                    _wait_for(node, held)
                    if _contains(fp, rec, False):
                        continue
                keep.append((rec, held))
            ranges = keep
        if hold is None:
            buf.written = []

    def _release(self, buf: Buffer, within: list | None = None) -> None:
        """``buf``'s range retired after its last access, back in the free list; ``within``:
        the accesses of one life of a buffer the kernel placed (never in the free list: only
        its bytes are no longer held)."""
        self._retired += 1
        last = buf.latest if within is None else _latest(within)
        insort(self.retired[buf.space], (buf.offset, buf.offset + buf.nbytes, self._retired,
                                         list(last.values())))
        self._widest[buf.space] = max(self._widest[buf.space], buf.nbytes)
        space = self.spaces[buf.space]
        if within is None:
            space.release(buf.offset, buf.nbytes)
            buf.writes = buf.reads = []
        else:
            space.used -= buf.nbytes

    # --- access patterns ----------------------------------------------------------------
    def ap(self, view: View, call: str, operand: str, spaces=("sbuf", "psum"),
           dma: bool = False, start: bool = True) -> AP:
        """The access pattern of ``view`` as operand ``operand`` of ``call``, checked: its
        address space, bounds, the partition dimension first, and for an engine's operand
        (not ``dma``, nor one whose spaces include HBM, nor one not streamed from its
        first partition: ``start`` false) the partition it starts at."""
        if view.moved is not None and not (
                call in ("tensor_copy", "tensor_copy_dynamic_src") and operand == "src"):
            raise NotSupported(f"'{call}' of a tile at a run-time offset ({operand})",
                               "the source of nisa.tensor_copy or tensor_copy_dynamic_src")
        if view.buf.space not in spaces:
            raise NkiError(f"Expected operand '{operand}' of '{call}' to be in address space "
                           f"'{'|'.join(sorted(spaces))}', but got a tile in '{view.buf.space}' "
                           f"instead.", "err_unsupported_memory")
        view.check_bounds()
        dims = view.dims
        if view.buf.space == "hbm":
            if not dims:
                return AP("hbm", view.dt, 0, 1, view.off, ((1, 1),))
            size, stride, _ = dims[0]
            free = merge_dims([(n, s) for n, s, _ in dims[1:]])
            return AP("hbm", view.dt, 0, size, view.off, free,
                      pstride=stride * view.itemsize)
        if not dims or not dims[0][2]:
            raise NkiError(f"operand '{operand}' of '{call}' ({view!r}) must have the "
                           f"partition dimension first", "err_leading_dimension_of_tensor_"
                                                         "must_be_partition")
        size, stride, _ = dims[0]
        if size > self.params.partitions:
            raise NkiError(f"number of partitions {size} exceed architecture limitation of "
                           f"{self.params.partitions}", "err_num_partition_exceed_arch_limit")
        if stride != 1 and size > 1:
            raise NotSupported("a partition dimension with a step", "partition ranges of "
                                                                    "step 1")
        if "hbm" not in spaces and not dma and start:  # an engine's stream (a DMA's may
            # start anywhere)
            self._start_partition(view.part, size, call, operand)
        if any(d[2] for d in dims[1:]):
            raise NkiError(f"operand '{operand}' of '{call}' ({view!r}) has a second "
                           f"partition dimension", "err_leading_dimension_of_tensor_must_"
                                                   "be_partition")
        free = merge_dims([(n, s) for n, s, _ in dims[1:]])
        if len(free) > 3:
            raise NotSupported(f"an operand of '{call}' with {len(free)} free dimensions "
                               f"that do not merge", "up to 3 free dimensions")
        return AP(view.buf.space, view.dt, view.part, size, view.off, free)

    def _start_group(self, size: int) -> int:
        group = self.params.partitions // 4
        while group < size:
            group *= 2
        return group

    def engine_may_start(self, start: int, size: int) -> bool:
        """Whether an engine may access ``size`` partitions from partition ``start`` (the
        rule of :meth:`_start_partition`)."""
        return start % self._start_group(size) == 0

    def _start_partition(self, start: int, size: int, call: str, operand: str) -> None:
        """The hardware's rule for an engine's access of SBUF or PSUM (NKI's architecture
        guide, "Data streaming between SBUF and compute engine"): the partitions fall in
        four quadrants; an access of up to one quadrant's partitions starts at a quadrant,
        of up to two at partition 0 or the middle one, of more at partition 0."""
        if self.engine_may_start(start, size):
            return
        parts, group = self.params.partitions, self._start_group(size)
        starts = [str(s) for s in range(0, parts, group)]
        allowed = (" or ".join(starts) if len(starts) < 3
                   else f"{', '.join(starts[:-1])} or {starts[-1]}")
        lo = group // 2 + 1 if group > parts // 4 else 1
        raise NkiError(f"operand '{operand}' of '{call}' accesses {size} partitions from "
                       f"partition {start}: an access of {lo} to {group} partitions must "
                       f"start at partition {allowed}")

    def dma_aps(self, dst: View, src: View, call: str) -> tuple[AP, AP]:
        """The access patterns of a copy from ``src`` to ``dst`` (one shape once size-1
        dimensions go): the on-chip side's partitions are the HBM side's first dimension of
        more than one element; free dimensions merge where both sides are contiguous."""
        spaces = ("hbm", "sbuf", "psum")
        a = self.ap(dst, call, "dst", spaces)
        b = self.ap(src, call, "src", spaces)
        on = dst if dst.buf.space != "hbm" else src
        parts = on.dims[0][0] if on.dims else 1

        def split(view: View):
            dims = [(n, s) for n, s, _ in view.dims]
            if view is on or (view.buf.space == "hbm" and on.buf.space == "hbm"):
                return (dims[0] if dims else (1, 0)), [d for d in dims[1:] if d[0] != 1]
            dims = [d for d in dims if d[0] != 1]
            if parts == 1:
                return (1, 0), dims
            if not dims or dims[0][0] != parts:
                raise NkiError(f"'{call}': destination shape {list(dst.shape)} and source "
                               f"shape {list(src.shape)} differ",
                               "err_store_dst_shape_smaller_than_other_shape")
            return dims[0], dims[1:]

        (pd, sd), fd = split(dst)
        (ps, ss), fs = split(src)
        if [n for n, _ in fd] != [n for n, _ in fs]:  # one contiguous run a side, one length
            md, ms = merge_dims(fd), merge_dims(fs)
            if len(md) == len(ms) == 1 and md[0][0] == ms[0][0]:
                fd, fs = list(md), list(ms)
        if pd != ps or [n for n, _ in fd] != [n for n, _ in fs]:
            raise NkiError(f"'{call}': destination shape {list(dst.shape)} and source shape "
                           f"{list(src.shape)} differ",
                           "err_store_dst_shape_smaller_than_other_shape")
        ja, jb = [], []
        for (n, s1), (_, s2) in zip(fd, fs, strict=True):
            if ja and ja[-1][1] == n * s1 and jb[-1][1] == n * s2:
                ja[-1], jb[-1] = (ja[-1][0] * n, s1), (jb[-1][0] * n, s2)
            else:
                ja.append((n, s1))
                jb.append((n, s2))
        if len(ja) > 3:
            raise NotSupported(f"'{call}' with {len(ja)} free dimensions that do not merge",
                               "copies of up to 3 free dimensions")
        ja, jb = tuple(ja) or ((1, 1),), tuple(jb) or ((1, 1),)

        def make(x: AP, view: View, pstride: int, free) -> AP:
            if x.space == "hbm":
                return AP("hbm", x.dtype, 0, pd, x.offset, free, pstride * x.itemsize)
            return AP(x.space, x.dtype, x.partition, pd, x.offset, free)

        return make(a, dst, sd, ja), make(b, src, ss, jb)

    def dma(self, dst: View, src: View, call: str, skip: bool = False,
            add: bool = False) -> None:
        """A DMA from ``src`` to ``dst`` on the next queue (with ``add``, the sum into
        ``dst``). Where one side is an HBM tensor indexed by a tile (:meth:`View._indirect`)
        it is an indirect copy of the rows the tile names (:class:`~hdl.core.isa.DmaCopy`
        ``index``): a row out of the tensor is an error when the copy runs, or with ``skip``
        is not moved; its dependencies take the whole tensor as touched."""
        a, b = self.dma_aps(dst, src, call)
        reads, writes = [(src, b)], [(dst, a)]
        if add:
            reads.append((dst, a))
        if dst.index is None and src.index is None:
            self.emit(self.dma_queue(), DmaCopy(dst=a, src=b, add=add), reads=reads,
                      writes=writes)
            return
        if dst.index is not None and src.index is not None:
            raise NotSupported(f"'{call}' between two tensors indexed by tiles",
                               "row indices on one side of a copy")
        side = dst if dst.index is not None else src
        ind = side.index
        index = self.ap(ind.tile, call, "index", ("sbuf",), dma=True)
        if ind.scalar:
            self._dma_at_scalar(dst, src, a, b, index, ind, skip, add)
            return
        if index.partitions != a.partitions:
            raise NkiError(f"'{call}': {index.partitions} row indices of tensor "
                           f"`{side.buf.name}` for a copy of {a.partitions} partitions")
        index = AP(index.space, index.dtype, index.partition, index.partitions, index.offset,
                   ((1, 1),))
        if side is dst:
            a = replace(a, pstride=ind.row_bytes)
            whole = replace(a, partitions=ind.rows)
            writes = [(dst, a), (dst, whole)]
            reads = [(src, b)] + ([(dst, whole)] if add else [])
        else:
            b = replace(b, pstride=ind.row_bytes)
            reads = [(src, b), (src, replace(b, partitions=ind.rows))] + \
                ([(dst, a)] if add else [])
        reads.append((ind.tile, index))
        self.emit(self.dma_queue(), DmaCopy(dst=a, src=b, index=index, index_dst=side is dst,
                                            rows=ind.rows, skip=skip, add=add),
                  reads=reads, writes=writes)

    def dma_compute(self, dst: View, srcs, call: str = "dma_compute", skip: bool = False):
        """``dst`` = the sum of ``srcs`` (two or three) by the DMA (:class:`DmaCompute`); two
        of which one is ``dst`` itself, an adding :meth:`dma` (read-modify-write, a tile
        of row indices on either side as NKI's scatter and gather forms have it)."""
        srcs = list(srcs)
        same = [s for s in srcs if isinstance(s, View) and s.buf is dst.buf
                and s.dims == dst.dims and s.part == dst.part and s.off == dst.off]
        if len(srcs) == 2 and same:
            other = srcs[1] if srcs[0] is same[0] else srcs[0]
            self.dma(dst, other, call, skip=skip, add=True)
            return
        if not 2 <= len(srcs) <= 3:
            raise NotSupported(f"'{call}' of {len(srcs)} sources", "two or three sources")
        if any(v.index is not None or v.moved is not None for v in (dst, *srcs)):
            raise NotSupported(f"'{call}' at run-time offsets, but for the read-modify-write "
                               f"of dst and one other source", "static access patterns")
        aps = [self.dma_aps(dst, v, call) for v in srcs]
        d = aps[0][0]
        if any(a != d for a, _ in aps):
            raise NotSupported(f"'{call}' of sources laid out unlike each other",
                               "sources of one layout")
        ins = DmaCompute(dst=d, a=aps[0][1], b=aps[1][1],
                         c=aps[2][1] if len(aps) > 2 else None)
        self.emit(self.dma_queue(), ins, reads=[(v, ap) for v, (_, ap) in zip(srcs, aps,
                                                                             strict=True)],
                  writes=[(dst, d)])

    def _dma_at_scalar(self, dst: View, src: View, a: AP, b: AP, index: AP, ind: Indirect,
                       skip: bool, add: bool) -> None:
        """:meth:`dma` whose HBM side moves by one index read at run time (``ind.scalar``):
        its dependencies take every place the index may move it to as touched."""
        ins = DmaCopy(dst=a, src=b, index=index, index_dst=dst.index is not None,
                      rows=ind.rows, skip=skip, add=add, index_stride=ind.row_bytes)
        whole = {n: ap for n, ap, _ in reach(ins)}
        reads = [(src, b), (src, whole["src"]), (ind.tile, index)]
        writes = [(dst, a), (dst, whole["dst"])]
        if add:
            reads.append((dst, whole["dst"]))
        self.emit(self.dma_queue(), ins, reads=reads, writes=writes)

    # --- emission -----------------------------------------------------------------------
    def emit(self, stream: str, ins, reads=(), writes=()) -> _Node:
        """Append ``ins`` to ``stream``; ``reads`` and ``writes`` are (view, access
        pattern) pairs, whose footprints give the instruction's dependencies (and whose
        on-chip buffers' offsets :meth:`program` adds to the access patterns)."""
        for view, _ in (*reads, *writes):
            if view.buf.zero:
                self._zero(view.buf)
        node = _Node(stream, ins, len(self.nodes), self.loops, self.making or kernel_line())
        deps: dict[str, _Node] = {}
        for writers, read in self.gates:  # the sequencer loads the register first
            if stream not in read:
                read.add(stream)
                for w in writers:
                    self._later(deps, w)
        bufs = {}
        read = []
        for view, ap in reads:
            buf = view.buf
            fp = footprint(ap)
            self._read(node, buf, fp, deps)
            bufs[id(ap)] = buf
            read.append((buf, fp))
        for view, ap in writes:
            buf = view.buf
            fp = footprint(ap)
            update = any(b is buf and overlaps(f, fp, buf.space == "hbm") for b, f in read)
            self._write(node, buf, fp, deps, ap, update)
            bufs[id(ap)] = buf
            if buf.space != "hbm":
                buf.written.append((node, fp))
        moved = []
        for name, ap, _ in ins.operands():
            buf = bufs[id(ap)]
            if buf.space != "hbm":
                moved.append((name, buf))
                buf.touch(node)
        node.moved = tuple(moved)
        deps.pop(stream, None)
        node.deps = tuple(deps.values())
        self.nodes.append(node)
        return node

    @staticmethod
    def _later(deps, node):
        if node is None:
            return
        have = deps.get(node.stream)
        if have is None or have.index < node.index:
            deps[node.stream] = node

    def _read(self, node, buf, fp, deps):
        hbm = buf.space == "hbm"
        covered = False
        for r in buf.writes:
            if overlaps(r.fp, fp, hbm):
                self._later(deps, r.writer)
                r.readers[node.stream] = node  # the newest node of all
                covered = covered or _contains(r.fp, fp, hbm)
        if not covered:
            buf.reads.append(_Record(fp, None, [node]))

    def _write(self, node, buf, fp, deps, ap, update):
        hbm = buf.space == "hbm"
        if node.loops and not update and not buf.fixed:  # placed tiles: blocks may share
            self._parallel_writes(node, buf, fp, ap)
        for records in (buf.writes, buf.reads):
            keep = []
            for r in records:
                if overlaps(r.fp, fp, hbm):
                    self._later(deps, r.writer)
                    for x in r.readers.values():
                        if x is not node:
                            self._later(deps, x)
                    if _contains(fp, r.fp, hbm):
                        continue
                keep.append(r)
            records[:] = keep
        buf.writes.append(_Record(fp, node, [], ap, update))

    @staticmethod
    def _parallel_writes(node, buf, fp, ap) -> None:
        """NKI's rule for ``nl.affine_range``: its iterations may run in parallel, so no
        two of them write the same element of a tensor, unless as an associative reduction
        (an accumulation, which reads what it writes)."""
        hbm = buf.space == "hbm"
        for r in buf.writes:
            if r.writer is None or r.update or not overlaps(r.fp, fp, hbm):
                continue
            both = _parallel_iterations(r.writer.loops, node.loops)
            if both is None or not _share_bytes(r.ap, ap):
                continue
            loop, first, second = both
            where = kernel_line()
            made = f" (made at {near(buf.where, where)})" if buf.where else ""
            raise NkiError(f"Unexpected output dependencies: iterations {first} and {second} "
                           f"of the nl.affine_range loop at {near(loop.where, where)} write "
                           f"the same elements of tensor `{buf.name}`{made}; index the "
                           f"destination by the loop, or iterate with nl.sequential_range",
                           "err_unexpected_output_dependencies", where)

    def _zero(self, buf: Buffer) -> None:
        """Write the zeros of an ``nl.zeros`` PSUM tensor that a matmul did not overwrite."""
        buf.zero = False
        self.fill(buf, "fp32", 0.0, "vector")

    def fill(self, buf: Buffer, dt: str, value: float, engine: str) -> None:
        """Every element of ``buf`` (all partitions, its whole range) = ``value``, in pieces
        of the engines' largest free size."""
        item = DTYPES[dt][1]
        n = buf.nbytes // item
        step = FREE_MAX[buf.space]
        parts = self.params.partitions
        for first in range(0, n, step):
            size = min(step, n - first)
            ap = AP(buf.space, dt, 0, parts, first * item, ((size, 1),))
            view = View(buf, dt, [(parts, 1, _P), (size, 1, _F)], 0, ap.offset)
            self.emit(engine, Memset(dst=ap, value=value), writes=[(view, ap)])

    def initialise(self, view: View, value: float) -> None:
        """``view``, a new tensor's tile, filled with ``value``: a PSUM tile of its own
        buffer with zeros where a matmul first writes it (or a memset, if read first),
        anything else by a memset now."""
        if view.buf.space == "psum" and value == 0.0 and not view.buf.fixed:
            view.buf.zero = True
            return
        if view.buf.fixed:
            self.memset(view, value, "gpsimd", "full")
        else:
            self.fill(view.buf, view.dt, value,
                      "gpsimd" if view.buf.space == "sbuf" else "vector")

    def memset(self, view: View, value: float, engine: str, call: str) -> None:
        """Fill ``view`` with ``value`` (GpSimd cannot reach PSUM: the vector engine does
        there); a tile above the engines' free size is filled a column at a time."""
        ap = self.ap(view, call, "dst")
        if engine == "gpsimd" and ap.space == "psum":
            engine = "vector"
        if ap.free <= FREE_MAX[ap.space] or len(view.dims) < 2:
            self.emit(engine, Memset(dst=ap, value=float(value)), writes=[(view, ap)])
            return
        for i in range(view.shape[1]):
            self.memset(view[(slice(None), i)], value, engine, call)

    def dma_queue(self) -> str:
        q = f"dma{self._queue}"
        self._queue = (self._queue + 1) % self.params.dma_queues
        return q

    def register_load(self, reg: Register, src: View, call: str = "register_load") -> None:
        """``reg`` takes the value ``src`` (one 32-bit element, on chip or in HBM) holds here:
        the program traced so far run by :attr:`oracle` (so the loops it bounds unroll as
        they run). Every stream's sequencer loads it before its next instruction, which
        waits for the instructions that wrote ``src`` (a later write of ``src`` does not wait
        for those loads: the value is the register's already)."""
        self.commit()
        if self.oracle is None:
            raise NotSupported(f"nisa.{call} without the kernel's inputs (a timing-only "
                               "run)", "a numeric run, whose data decides the register's "
                               "value")
        if not isinstance(reg, Register):
            raise NkiError(f"{call}: dst must be a register from nisa.register_alloc, not "
                           f"{type(reg).__name__}")
        if int(np.prod(src.shape)) != 1 or src.dt not in ("int32", "uint32"):
            raise NkiError(f"{call}: src must hold one int32 or uint32 element, not "
                           f"{list(src.shape)} {src.dt}")
        fp = footprint(self.ap(src, call, "src", ("sbuf", "psum", "hbm"), dma=True))
        raw = np.ascontiguousarray(self.oracle(self, src)).view(np.uint8).reshape(-1)[:4]
        reg.value = _register_word(int(raw.view(np.uint32)[0]))
        self.register_values.append(reg.value)
        self.register_lines.append(kernel_line())
        hbm = src.buf.space == "hbm"
        self.gates.append(([r.writer for r in src.buf.writes
                            if r.writer is not None and overlaps(r.fp, fp, hbm)], set()))

    def meet(self, call: str, exchange: tuple[View, View, int, int] | None = None) -> None:
        """The cores of the launch meet here (``call``: ``core_barrier``, or ``sendrecv`` with
        its ``exchange``: src and dst tiles in SBUF, the rank sent to and received from):
        every instruction traced so far ends, on both, before any later one starts
        (:meth:`programs`), and ``dst`` then holds the other core's ``src``. Both tiles stay
        live to here."""
        self.commit()
        at = len(self.nodes)
        moved = None
        if exchange is not None:
            src, dst, to, frm = exchange
            aps = []
            for name, v in (("src", src), ("dst", dst)):
                ap = self.ap(v, call, name, ("sbuf",), dma=True)
                buf = v.buf
                buf.first = at if buf.first < 0 else buf.first
                buf.last = max(buf.last, at)
                aps += [ap, buf]
            if (aps[0].dtype, aps[0].partitions, aps[0].free) != \
                    (aps[2].dtype, aps[2].partitions, aps[2].free):
                raise NkiError(f"'{call}': src {list(src.shape)} {src.dt} and dst "
                               f"{list(dst.shape)} {dst.dt} differ in type or shape")
            moved = (*aps, int(to), int(frm))
        self.boundaries.append((at, kernel_line(), moved))

    def program(self):
        """The traced instructions as a :class:`~sim.core.program.Program` (one phase:
        :meth:`programs`)."""
        (prog,) = self.programs()
        return prog

    def programs(self) -> list:
        """The traced instructions as a :class:`~sim.core.program.Program` for each phase
        between the places the cores meet (:attr:`boundaries`), in order: on-chip buffers
        allocated (:meth:`allocate`) and each operand moved to its buffer's offset; in trace
        order through a builder, a wait before an instruction for each other stream of its
        phase it depends on (unless that stream already waited as far; an earlier phase has
        ended), a signal after each instruction another stream waits for. Each phase's
        instructions at the kernel's lines: :attr:`phase_lines`."""
        self.allocate()
        cuts = [at for at, _, _ in self.boundaries]
        phases: list[list[_Node]] = [[] for _ in range(len(cuts) + 1)]
        for node in self.nodes:
            phases[bisect_left(cuts, node.index + 0.5)].append(node)
        phase_of = {id(n): k for k, nodes in enumerate(phases) for n in nodes}
        for node in self.nodes:
            for dep in node.deps:
                if phase_of[id(dep)] == phase_of[id(node)]:
                    dep.signal = True
        out, self.phase_lines = [], []
        for k, nodes in enumerate(phases):
            b = self.builder if k == 0 else Builder(self.params)
            if k:
                b.program.tensors = dict(self.builder.program.tensors)
                b.program.hbm_bytes = self.builder.program.hbm_bytes
            lines = self.lines if k == 0 else {}
            self._emit_phase(b, nodes, k, phase_of, lines)
            out.append(b.program)
            self.phase_lines.append(lines)
        return out

    def _emit_phase(self, b: Builder, nodes, k: int, phase_of: dict, lines: dict) -> None:
        """:meth:`programs`' phase ``k`` of ``nodes`` through builder ``b``."""
        waited: dict[tuple[str, int], int] = {}
        # an access pattern shared by instructions moves once for each buffer it is moved by
        moved: dict[tuple[int, int], AP] = {}
        for node in nodes:
            for dep in node.deps:
                if phase_of[id(dep)] != k:  # an earlier phase: ended before this one
                    continue
                ev = dep.event
                key = (node.stream, ev.sem)
                if waited.get(key, 0) < ev.value:
                    waited[key] = ev.value
                    b.wait(node.stream, ev)
            ins = node.ins
            if node.moved:
                changes = {}
                for name, buf in node.moved:
                    ap = getattr(ins, name)
                    new = moved.get((id(ap), id(buf)))
                    if new is None:
                        new = moved[id(ap), id(buf)] = AP(ap.space, ap.dtype, ap.partition,
                                                 ap.partitions, ap.offset + buf.offset,
                                                 ap.dims, ap.pstride)
                    changes[name] = new
                ins = replace(ins, **changes)
            b.emit(node.stream, ins)
            lines[node.stream, len(b.program.streams[node.stream]) - 1] = node.where
            if node.signal:
                node.event = b.signal(node.stream)

    # --- pending results ----------------------------------------------------------------
    def pend(self, view: View, make, kind: str, mask: Mask | None) -> View:
        """Make ``view`` the pending result of an op: ``make(dst, accumulate)`` emits the op
        into ``dst`` (``view`` cut by ``mask``, or the tensor it is assigned to)."""
        self.commit()
        self.pending = _Pending(view, make, kind, mask, self.loops, kernel_line())
        return view

    def commit(self) -> None:
        """Emit the pending result into its own tile, in the loop iterations it was made."""
        p, self.pending = self.pending, None
        if p is not None:
            loops, self.loops = self.loops, p.loops
            try:
                if not dropped(p.mask):
                    self._make(p, p.view.cut(p.mask), None)
            finally:
                self.loops = loops

    def _make(self, p: _Pending, dst: View, accumulate) -> None:
        """Emit the pending ``p`` into ``dst``, its instructions at the line that made it."""
        outer, self.making = self.making, p.where
        try:
            p.make(dst, accumulate)
        finally:
            self.making = outer

    def take(self, value) -> View:
        """``value`` as an operand: a pending result is emitted first."""
        if self.pending is not None:
            self.commit()
        return value

    def assign(self, dst: View, value, temporary: bool) -> None:
        """``dst[...] = value``."""
        from . import language as nl

        p = self.pending
        if isinstance(value, View) and value.buf is dst.buf and value.dims == dst.dims \
                and value.part == dst.part and value.off == dst.off:
            self.commit()
            return  # the write of an in-place update (t[...] += x)
        if p is not None and value is p.view and temporary and _fits(dst, value, p.kind):
            self.pending = None
            if not dropped(p.mask):
                self._make(p, dst.cut(p.mask), None)
            return
        self.commit()
        if isinstance(value, View):
            if dst.buf.space == "hbm":
                nl.store(dst, value)
            elif value.buf.space == "hbm":
                self.assign(dst, nl.load(value), True)
            else:
                nl.copy_into(dst, value)
            return
        if isinstance(value, (int, float, np.number)):
            if dst.buf.space != "hbm" and not (dst.dims and dst.dims[0][2]):
                # elements of one partition, its index given (``t[i, j] = v``): that
                # partition; in SBUF where no engine may start an access there (the
                # partition start rule), a DMA, which may, writes them from a constant in HBM
                dst = View(dst.buf, dst.dt, ((1, 1, True),) + dst.dims, dst.part, dst.off,
                           dst.checks)
                if dst.buf.space == "sbuf" and not self.engine_may_start(dst.part, 1):
                    self.dma(dst, self.constant(np.full(dst.shape, value), dst.dt), "memset")
                    return
            self.memset(dst, float(value), "gpsimd" if dst.buf.space == "sbuf" else "vector",
                        "memset")
            return
        raise NotSupported(f"assigning a {type(value).__name__} to a tensor",
                           "tiles and numbers")

    def accumulate(self, dst: View, value, temporary: bool) -> None:
        """``dst += value``: a pending matmul accumulates into PSUM ``dst``; anything else
        adds on the vector engine."""
        from . import language as nl

        p = self.pending
        if p is not None and value is p.view and temporary and p.kind == "matmul" \
                and dst.buf.space == "psum" and _fits(dst, value, "matmul"):
            self.pending = None
            if not dropped(p.mask):
                self._make(p, dst.cut(p.mask), "add")
            return
        self.commit()
        nl.add_into(dst, dst, value)


def _fits(dst: View, value: View, kind: str) -> bool:
    if _squeeze(dst.shape) != _squeeze(value.shape):
        return False
    if kind in ("dma", "matmul", "transpose"):
        return dst.dt == value.dt and (kind == "dma" or dst.buf.space == "psum")
    return True


def _squeeze(shape) -> tuple:
    return tuple(s for s in shape if s != 1)


def merge_dims(dims) -> tuple:
    """Free dimensions (size, stride) with size-1 ones dropped and contiguous ones merged."""
    out = []
    for n, s in dims:
        if n == 1:
            continue
        if out and out[-1][1] == n * s:
            out[-1] = (out[-1][0] * n, s)
        else:
            out.append((n, s))
    return tuple(out) or ((1, 1),)
