"""The data of a numeric run (:class:`Data`): SBUF, PSUM and HBM, and each instruction's
effect on them, bit for bit through the unit golden models:
:func:`sim.golden.systolic.matmul` (:func:`~sim.golden.systolic.matmul_mx` for the MX quad
types), :mod:`sim.golden.vector`, :mod:`sim.golden.activation` and the casts of
:mod:`sim.golden.numerics`.

Stochastic rounding draws from the generators of the engines' units as the core RTL has
them (:func:`unit_beats`): each unit's lane ``l`` starts from its seeding
(:func:`hdl.numerics.cast.rng_initial_state` of the chip's generator, the run's ``seed``
and ``l``) and advances once per output beat of its unit, whatever the beat's rounding and
format; a stochastic cast of a beat uses the words of that beat."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from hdl.core import isa
from hdl.core.isa import (
    AP,
    Activation,
    AffineSelect,
    DmaCompute,
    DmaCopy,
    Dropout,
    FindIndex8,
    GatherFlattened,
    Instruction,
    Iota,
    LoadStationary,
    LocalGather,
    MatchReplace8,
    Max8,
    Memset,
    MultiplyMoving,
    NonzeroWithCount,
    QuantizeMx,
    Random,
    RangeSelect,
    SequenceBounds,
    StreamShuffle,
    TensorCopy,
    TensorCopyDynamic,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    TensorTensorScan,
    Transpose,
)
from hdl.numerics.dtypes import MX_ELEMENT_DTYPES
from hdl.numerics.formats import E8M0_BIAS, MX_FORMATS, IntFormat, format_by_name
from hdl.vector.activation import ActivationParams
from hdl.vector.ops import VectorOp
from hdl.vector.vector import VectorParams
from sim.golden import activation, numerics, systolic, vector

from .program import Program
from .rules import ProgramError, Rules, fail, shares_pes

__all__ = ["Data", "unit_beats"]

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}
#: The integer types the engines take by value besides int8 (an :class:`IntFormat`); the
#: 32-bit ones as words by :func:`isa.integer_words`' instructions.
_INTS = {"int32": np.int32, "uint32": np.uint32, "uint8": np.uint8, "uint16": np.uint16}
_WORDS = ("int32", "uint32")
_SELECTIONS = (Max8, FindIndex8, MatchReplace8, Random, Dropout, GatherFlattened,
               SequenceBounds, RangeSelect, LocalGather, AffineSelect, NonzeroWithCount)
#: The comparisons of an integer with 0 (:class:`~hdl.core.isa.AffineSelect`).
_WITH_ZERO = {VectorOp.IS_EQUAL: np.equal, VectorOp.NOT_EQUAL: np.not_equal,
              VectorOp.GREATER: np.greater, VectorOp.GREATER_EQUAL: np.greater_equal,
              VectorOp.LESS: np.less, VectorOp.LESS_EQUAL: np.less_equal}


def _partition(ap: AP, p: int) -> AP:
    """Partition (HBM: row) ``p`` of ``ap`` alone."""
    if ap.space == "hbm":
        return replace(ap, partitions=1, offset=ap.offset + p * ap.pstride)
    return replace(ap, partition=ap.partition + p, partitions=1)


class Data:
    """The memories and the numeric effect of each instruction."""

    def __init__(self, rules: Rules, program: Program, hbm, seed: int):
        p = rules.params
        self.rules = rules
        self.params = p
        self.sbuf = np.zeros((p.partitions, p.sbuf_bytes), dtype=np.uint8)
        self.psum = np.zeros((p.partitions, p.psum_bytes), dtype=np.uint8)
        if hbm is None:
            hbm = np.zeros(program.hbm_bytes, dtype=np.uint8)
        if hbm.dtype != np.uint8 or hbm.size < program.hbm_bytes:
            raise ProgramError(f"hbm must be a uint8 array of at least {program.hbm_bytes} "
                               f"bytes, not {hbm.dtype} x {hbm.size}")
        self.hbm = hbm
        self.seed = seed
        #: when a list, each indirect DMA's indexed side where its index put it, appended
        #: as it runs: ``(stream, instruction index, access pattern, written)``
        self.landed: list | None = None
        self.kinds = [isa.engine_kind(s) for s in program.streams]
        self.beats: dict[str, int] = {}  # unit -> output beats it gave since the run began
        self.tiles: dict[tuple[int, int], tuple] = {}  # tile position -> (bits, fmt, placed)
        self._act = {}

    # raw element access ---------------------------------------------------------------------
    def _view(self, ap: AP) -> np.ndarray:
        """The elements of ``ap`` as a strided view of the memory (the rules checked its
        bounds): partitions first, then the free dimensions."""
        item = ap.itemsize
        if ap.space == "hbm":
            mem, base, pstride = self.hbm, ap.offset, ap.pstride
        else:
            mem = self.sbuf if ap.space == "sbuf" else self.psum
            pstride = mem.shape[1]
            base = ap.partition * pstride + ap.offset
        shape = (ap.partitions,) + tuple(n for n, _ in ap.dims)
        strides = (pstride,) + tuple(st * item for _, st in ap.dims)
        return np.ndarray(shape, dtype=_UINT[item], buffer=mem, offset=base, strides=strides)

    def read(self, ap: AP) -> np.ndarray:
        return self._view(ap).copy()

    def write(self, ap: AP, bits: np.ndarray) -> None:
        view = self._view(ap)
        view[...] = np.asarray(bits).reshape(view.shape)

    # typed access ----------------------------------------------------------------------------
    def codes(self, ap: AP) -> np.ndarray:
        """The element codes of ``ap``, (partitions, free): a tf32 word's top 19 bits, the
        stored element otherwise."""
        bits = self.read(ap).reshape(ap.partitions, -1)
        return bits >> isa.TF32_SHIFT if ap.dtype == "tf32" else bits

    def mx_tile(self, ap: AP, scale: AP) -> tuple[np.ndarray, np.ndarray]:
        """An MX tile of ``P`` partitions as :func:`sim.golden.systolic.matmul_mx` takes it:
        the ``(4P, F)`` element codes, code ``i`` of partition ``p`` at row ``4p + i``, and
        the ``(ceil(P / 8), F)`` scales of its groups of 8 partitions."""
        words = self.read(ap).reshape(ap.partitions, -1).astype(np.uint32)
        bits = 8 * ap.itemsize // isa.MX_QUAD
        quad = np.stack([(words >> (bits * i)) & ((1 << bits) - 1)
                         for i in range(isa.MX_QUAD)], axis=1)
        codes = quad.reshape(ap.partitions * isa.MX_QUAD, -1)
        groups = -(-ap.partitions // isa.MX_GROUP_PARTITIONS)
        rows = [isa.mx_scale_partition(g) for g in range(groups)]
        return codes, self.read(scale).reshape(scale.partitions, -1)[rows]

    def tensor_codes(self, ins: LoadStationary | MultiplyMoving) -> np.ndarray:
        """The (K, F) tile of a stationary or moving ``src`` as the array contracts it, row
        ``j`` the ``j``-th product of each sum: its partitions in order, or for a double row
        the contraction indices in :func:`~hdl.core.isa.double_row_order` (the pairs' K
        halves, index ``i * P + p`` for pair ``i`` of partition ``p``)."""
        codes = self.codes(ins.src)
        if not ins.double_row:
            return codes
        parts = ins.src.partitions
        halves = codes.reshape(parts, 2, -1).transpose(1, 0, 2).reshape(2 * parts, -1)
        return halves[isa.double_row_order(parts)]

    def read32(self, ap: AP, words: bool = False) -> np.ndarray:
        """fp32 bit patterns, (partitions, free), of an operand of any type, each element
        by its value (an integer rounded to the nearest fp32, ties to even) or, with
        ``words``, an ``int32``/``uint32`` element's word as it is (:func:`isa.integer_words`)."""
        bits = self.codes(ap)
        if ap.dtype == "fp32" or (words and ap.dtype in _WORDS):
            return bits.astype(np.uint32)
        if ap.dtype in _INTS:
            values = bits.astype(np.uint32)
            if ap.dtype == "int32":
                values = values.view(np.int32)
            return values.astype(np.float32).view(np.uint32)
        return np.asarray(numerics.widen(bits, format_by_name(ap.dtype)), dtype=np.uint32)

    def copied32(self, ap: AP, words: bool = False) -> np.ndarray:
        """:meth:`read32` of ``ap`` through the vector unit's copy (a NaN canonical), as the
        engines' copies and searches stream their data."""
        return vector.elementwise(VectorOp.COPY, self.read32(ap, words), 0).reshape(
            ap.partitions, -1)

    def write32(self, ap: AP, bits32: np.ndarray, draw: tuple[int, int] | None = None,
                words: bool = False) -> None:
        """Store fp32 bit patterns (partitions, free) into ``ap``, cast to its type (an
        integer type: the nearest integer, ties to even, saturated; NaN 0; with ``words``
        an ``int32``/``uint32`` element takes the word as it is), to nearest even or, with
        ``draw``, stochastically: ``(start, lanes)``, the unit's beat of the first element
        and its lanes, which serve the partitions in turns of ``lanes``
        (:func:`unit_beats`)."""
        bits32 = np.asarray(bits32, dtype=np.uint32).reshape(ap.partitions, -1)
        if ap.dtype == "fp32" or (words and ap.dtype in _WORDS):
            self.write(ap, bits32)
            return
        fmt = np.iinfo(_INTS[ap.dtype]) if ap.dtype in _INTS else format_by_name(ap.dtype)
        if isinstance(fmt, (np.iinfo, IntFormat)):  # the nearest integer, ties to even,
            with np.errstate(invalid="ignore"):      # saturated
                v = np.nan_to_num(np.rint(bits32.view(np.float32).astype(np.float64)))
            lo, hi = (fmt.min, fmt.max) if isinstance(fmt, np.iinfo) else \
                (fmt.min_value, fmt.max_finite)
            self.write(ap, np.clip(v, lo, hi).astype(np.int64) & ((1 << fmt.bits) - 1))
            return
        x = bits32.T.view(np.float32)  # (beats, partitions)
        if draw is None:
            out = numerics.cast_bits(x, fmt)
        else:  # turn t: the next beats, partition t * lanes + l on lane l
            start, lanes = draw
            n = x.shape[0]
            out = np.concatenate([numerics.cast_bits(x[:, at:at + lanes], fmt, "stochastic",
                                                     self.seed, self.params.rng,
                                                     start + t * n)
                                  for t, at in enumerate(range(0, x.shape[1], lanes))],
                                 axis=1)
        if ap.dtype == "tf32":
            out = out.astype(np.uint32) << isa.TF32_SHIFT
        self.write(ap, out.T)

    def scalar(self, ap: AP | None, imm: float, partitions: int,
               words: bool = False) -> np.ndarray:
        if ap is None:
            return np.full(partitions, np.float32(imm).view(np.uint32), dtype=np.uint32)
        return self.read32(ap, words).reshape(partitions)

    # instructions ----------------------------------------------------------------------------
    def load(self, ins: LoadStationary) -> None:
        """The tile replaces every tile it overlaps on the array."""
        placed = self.rules.placement(ins)
        fmt = self.params.array_format(isa.input_format(ins.src.dtype))
        if ins.src.dtype in isa.MX_DTYPES:
            tile = self.mx_tile(ins.src, ins.scale) + (fmt, placed)
        else:
            tile = (self.tensor_codes(ins), None, fmt, placed)
        self.tiles = {pos: t for pos, t in self.tiles.items() if not shares_pes(placed, t[3])}
        self.tiles[(ins.row, ins.col)] = tile

    def multiply(self, ins: MultiplyMoving) -> None:
        """The array's sums into PSUM: fp32 (int32) words as they are or, into a bf16 tile
        (NeuronCore-v4 on), each fp32 sum (with ``accumulate`` the tile's value widened and
        added in fp32) rounded to nearest even into bf16."""
        read = self.read32 if ins.dst.dtype == "bf16" else self.read
        psum = read(ins.dst).reshape(ins.dst.partitions, -1) if ins.accumulate else None
        tile, tile_scales, fmt, _ = self.tiles[(ins.row, ins.col)]
        mfmt = self.params.array_format(isa.input_format(ins.src.dtype))
        if ins.src.dtype in isa.MX_DTYPES:
            moving, scales = self.mx_tile(ins.src, ins.scale)
            out = systolic.matmul_mx(tile, moving, fmt, tile_scales, scales, psum,
                                     ins.accumulate, moving_fmt=mfmt)
        else:
            out = systolic.matmul(tile, self.tensor_codes(ins), fmt, psum, ins.accumulate,
                                  moving_fmt=mfmt)
        if ins.dst.dtype == "bf16":
            self.write32(ins.dst, out)
        else:
            self.write(ins.dst, out)

    def transpose(self, ins: Transpose) -> None:
        """The array's transpose pass: the codes as they were, in the input's format."""
        out = systolic.transpose(self.codes(ins.src), self.params.array_format(ins.src.dtype))
        self.write(ins.dst, out << isa.TF32_SHIFT if ins.src.dtype == "tf32" else out)
        self.tiles = {}

    def dma(self, ins: DmaCopy, stream: str, index: int) -> None:
        """The copy (converting between two types through fp32; with ``add``, the sum into
        ``dst``); an indirect one
        (:class:`~hdl.core.isa.DmaCopy` ``index``) moves the rows its index names, a row out
        of the tensor breaking the rule "index bounds" (the message names the first as an
        element of the flattened tensor, as numpy does) unless the copy skips it; one of one
        index (``index_stride``) moves its indexed side by that index's strides."""
        pairs = [(ins.dst, ins.src)]
        if ins.index is not None and ins.index_stride:  # one index, for every partition
            word = self.read(ins.index).reshape(-1)[:1]
            at = int(word.view(_INTS[ins.index.dtype])[0])
            ok = 0 <= at < ins.rows
            if not ins.skip and not ok:
                fail(stream, index, ins, "index bounds",
                     f"index {at} reaches outside the tensor (it takes 0 .. {ins.rows - 1})")
            side = ins.dst if ins.index_dst else ins.src
            moved = replace(side, offset=side.offset + at * ins.index_stride)
            pairs = [] if not ok else [(moved, ins.src) if ins.index_dst else (ins.dst, moved)]
        elif ins.index is not None:
            words = self.read(ins.index).reshape(ins.index.partitions, -1)[:, 0]
            rows = words.view(_INTS[ins.index.dtype]).astype(np.int64)
            ok = (rows >= 0) & (rows < ins.rows)
            side, other = (ins.dst, ins.src) if ins.index_dst else (ins.src, ins.dst)
            if not ins.skip and not ok.all():
                per_row = side.pstride // side.itemsize
                bad = int(rows[np.argmin(ok)])
                fail(stream, index, ins, "index bounds",
                     f"index {bad * per_row} is out of bounds for axis 0 with size "
                     f"{ins.rows * per_row}")
            pairs = []
            for p in np.flatnonzero(ok):
                row = replace(side, partitions=1, offset=side.offset + int(rows[p]) * side.pstride)
                mine = _partition(other, int(p))
                pairs.append((row, mine) if ins.index_dst else (mine, row))
        if self.landed is not None and ins.index is not None:
            self.landed += [(stream, index, dst if ins.index_dst else src, ins.index_dst)
                            for dst, src in pairs]
        for dst, src in pairs:
            if ins.add:  # the vector unit's fp32 add
                self.write32(dst, vector.elementwise(VectorOp.ADD, self.read32(dst),
                                                     self.read32(src)))
            elif dst.dtype != src.dtype:  # through fp32
                self.write32(dst, self.read32(src))
            else:
                self.write(dst, self.read(src))

    def dma_compute(self, ins: DmaCompute) -> None:
        """``dst`` = the sum of the sources, each widened to fp32, added in fp32 in order by
        the vector unit's adder, the total cast to ``dst``'s type once."""
        total = None
        for src in ins.sources:
            x = self.read32(src).reshape(ins.dst.partitions, -1)
            total = x if total is None else vector.elementwise(VectorOp.ADD, total, x)
        self.write32(ins.dst, total)

    def quantize_mx(self, ins: QuantizeMx) -> None:
        """``src`` into MX codes and E8M0 scales (:class:`~hdl.core.isa.QuantizeMx`)."""
        g, quad = isa.MX_GROUP_PARTITIONS, isa.MX_QUAD
        x = self.read32(ins.src).view(np.float32).astype(np.float64)
        p, f = ins.dst.partitions, ins.dst.free
        groups = x.reshape(p // g, g, f, quad)
        finite = np.where(np.isfinite(groups), np.abs(groups), 0.0)
        fmt = isa.MX_DTYPES[ins.dst.dtype]
        shared = MX_FORMATS[fmt].shared_exponents(finite.max(axis=(1, 3)), headroom=1)
        scaled = groups / np.ldexp(1.0, shared)[:, None, :, None]
        codes = scaled.astype(MX_ELEMENT_DTYPES[fmt]).view(np.uint8).astype(np.uint32)
        words = sum(codes[..., i] << np.uint32(8 * i) for i in range(quad))
        self.write(ins.dst, words.reshape(p, f).astype(np.uint32))
        scales = self.read(ins.scale).reshape(ins.scale.partitions, -1)
        for k in range(p // g):
            scales[isa.mx_scale_partition(k)] = (shared[k] + E8M0_BIAS).astype(np.uint8)
        self.write(ins.scale, scales)

    def moved_source(self, ins: TensorCopyDynamic) -> AP:
        """``ins``'s source where its offset puts it, the offset read now; one outside
        ``0 .. count - 1`` breaks the rule "dynamic offset"."""
        word = self.read(ins.offset).reshape(-1)[:1]
        v = int(word.view(_INTS[ins.offset.dtype])[0])
        if not 0 <= v < ins.count:
            detail = f"{v} is not one of 0 .. {ins.count - 1}"
            raise ProgramError(f"`{isa.format_instruction(ins)}`: dynamic offset: {detail}",
                               None, "dynamic offset", detail)
        return replace(ins.src, offset=ins.src.offset + v * ins.stride * ins.src.itemsize)

    def _uniform(self, stream: int, ins: Instruction) -> np.ndarray:
        """(partitions, free) fp32 numbers in [0, 1) from the generators of the unit ``ins``
        streams through, the beats it took (:func:`unit_beats`): ``(w >> 8) * 2**-24``."""
        unit, lanes, beats = unit_beats(self.kinds[stream], ins, self.params)
        start = self.beats[unit] - beats
        words = numerics.random_words(self.params.rng, self.seed, beats, lanes, start)
        return vector.uniform(words[:, :ins.dst.partitions].T).view(np.float32)

    def _selection(self, stream: int, ins: Instruction) -> None:
        """The instructions of :data:`_SELECTIONS`: the 8-wide searches, the random draws,
        the gathers, the range select and the sequence bounds."""
        f32 = np.float32
        if isinstance(ins, Max8):
            x = self.copied32(ins.src).view(f32)
            top = -np.sort(-x, axis=1, kind="stable")[:, :8]
            self.write32(ins.dst, np.ascontiguousarray(top).view(np.uint32))
        elif isinstance(ins, FindIndex8 | MatchReplace8):
            data = self.copied32(ins.data).view(f32).copy()
            vals = self.read32(ins.vals).view(f32).reshape(ins.vals.partitions, -1)
            found = np.full(vals.shape, 0xFFFFFFFF if isinstance(ins, FindIndex8) else 0,
                            dtype=np.uint32)
            for p in range(data.shape[0]):
                for j in range(vals.shape[1]):
                    hits = np.flatnonzero(data[p] == vals[p, j])
                    if hits.size:
                        found[p, j] = hits[0]
                        if isinstance(ins, MatchReplace8):
                            data[p, hits[0]] = f32(ins.imm)
            if isinstance(ins, FindIndex8):
                self.write(ins.dst, found)
                return
            self.write32(ins.dst, data.view(np.uint32))
            if ins.dst_idx is not None:
                self.write(ins.dst_idx, found)
        elif isinstance(ins, Random):
            self.write32(ins.dst, self._uniform(stream, ins).view(np.uint32))
        elif isinstance(ins, Dropout):
            x = self.copied32(ins.src).view(f32)
            prob = self.scalar(ins.prob, ins.imm, x.shape[0]).view(f32)[:, None]
            out = np.where(self._uniform(stream, ins) >= prob, x, f32(0))
            self.write32(ins.dst, out.astype(f32).view(np.uint32))
        elif isinstance(ins, LocalGather):
            src = self.read(ins.src).reshape(ins.src.partitions, -1)
            idx = self.read(ins.indices).reshape(ins.indices.partitions, -1)
            out = np.empty((src.shape[0], ins.valid * ins.per), dtype=src.dtype)
            for g in range(0, src.shape[0], 16):
                starts = idx[g:g + 16].flatten(order="F")[:ins.valid].astype(np.int64)
                take = (starts[:, None] + np.arange(ins.per)[None, :]).reshape(-1)
                out[g:g + 16] = src[g:g + 16][:, np.minimum(take, src.shape[1] - 1)]
            self.write(ins.dst, out)
        elif isinstance(ins, RangeSelect):
            x = self.copied32(ins.src)
            place = (ins.start + np.arange(x.shape[1])).astype(f32).view(np.uint32)
            keep = np.ones(x.shape, dtype=bool)
            for op, bound in ((ins.op0, ins.bound0), (ins.op1, ins.bound1)):
                b = self.read32(bound).reshape(-1, 1)  # the vector unit's comparison
                keep &= vector.elementwise(op, np.broadcast_to(place, x.shape), b) != 0
            self.write32(ins.dst, np.where(keep, x, f32(ins.fill).view(np.uint32)))
        elif isinstance(ins, AffineSelect):
            x = self.copied32(ins.src)
            p = np.arange(x.shape[0], dtype=np.int64)[:, None]
            i = np.arange(x.shape[1], dtype=np.int64)[None, :]
            keep = _WITH_ZERO[ins.op](ins.base + p * ins.pstep + i * ins.step, 0)
            self.write32(ins.dst, np.where(keep, x, f32(ins.fill).view(np.uint32)))
        elif isinstance(ins, NonzeroWithCount):
            x = self.read(ins.src).reshape(ins.src.partitions, -1)
            x = x.view(f32) if ins.src.dtype == "fp32" else x.view(np.int32)
            out = self.read(ins.dst).reshape(ins.dst.partitions, -1).view(np.int32)
            for p in range(0, x.shape[0], isa.GPSIMD_CORE_PARTITIONS):
                at = np.flatnonzero(x[p] != 0)
                out[p] = ins.padding
                out[p, :at.size] = (at + ins.offset).astype(np.int64).astype(np.int32)
                out[p, -1] = at.size
            self.write(ins.dst, out.view(np.uint32))
        elif isinstance(ins, SequenceBounds):
            ids = self.read32(ins.src).view(f32).reshape(-1)
            n = ids.size
            start, end = np.empty(n, f32), np.empty(n, f32)
            for i in range(n):
                pad = ids[i] == 0
                start[i] = n if pad else start[i - 1] if i and ids[i] == ids[i - 1] else i
            for i in range(n - 1, -1, -1):
                pad = ids[i] == 0
                end[i] = -1 if pad else end[i + 1] if i < n - 1 and ids[i] == ids[i + 1] \
                    else i + 1
            self.write32(ins.dst, np.concatenate([start, end]).view(np.uint32))
        else:  # GatherFlattened: each partition's elements by index, bits as they are
            src = self.read(ins.src).reshape(ins.src.partitions, -1)
            idx = self.read(ins.indices).reshape(ins.indices.partitions, -1).astype(np.int64)
            inside = idx < src.shape[1]
            got = np.take_along_axis(src, np.where(inside, idx, 0), axis=1)
            self.write(ins.dst, np.where(inside, got, 0).astype(src.dtype))

    def scan(self, ins: TensorTensorScan, words: bool = False) -> np.ndarray:
        """The fp32 results of a scan, (partitions, free): the vector unit's
        (:func:`sim.golden.vector.scan`), the running value kept in fp32."""
        a, b = self.read32(ins.a, words), self.read32(ins.b, words)
        prev = self.scalar(ins.initial, ins.imm, a.shape[0], words)
        return vector.scan(ins.op0, ins.op1, a.T, b.T, prev, reverse0=ins.reverse0,
                           reverse1=ins.reverse1).T

    def _activation_params(self, lanes: int):
        params = self._act.get(lanes)
        if params is None:
            params = self._act[lanes] = ActivationParams(lanes=lanes,
                                                         functions=self.params.functions)
        return params

    def _draw(self, stream: int, ins: Instruction) -> tuple[int, int] | None:
        """Advance the generators of the unit ``ins`` streams through past its output beats;
        the ``draw`` of :meth:`write32` where it rounds stochastically (None: to nearest
        even)."""
        unit, lanes, beats = unit_beats(self.kinds[stream], ins, self.params)
        start = self.beats.get(unit, 0)
        self.beats[unit] = start + beats
        return (start, lanes) if getattr(ins, "rounding", "rne") == "stochastic" else None

    def execute(self, stream: int, ins: Instruction) -> None:
        cls = ins.__class__
        draw = self._draw(stream, ins)
        w = isa.integer_words(ins)
        if cls is Activation:
            x = self.read32(ins.src)
            lanes, n = x.shape
            bias = self.scalar(ins.bias, 0.0, lanes)
            scale = np.full(lanes, np.float32(ins.scale).view(np.uint32), dtype=np.uint32)
            last = np.zeros(n, dtype=bool)
            last[-1] = True
            out, sums = activation.run(self._activation_params(lanes), ins.func, x.T, scale,
                                       bias, last)
            self.write32(ins.dst, out.T, draw)
            if ins.reduce_dst is not None:
                self.write32(ins.reduce_dst, sums[-1].reshape(lanes, 1))
        elif cls is TensorTensor:
            r = vector.elementwise(ins.op, self.read32(ins.a, w), self.read32(ins.b, w))
            self.write32(ins.dst, r, draw, w)
        elif cls is TensorScalar:
            x = self.read32(ins.src, w)
            lanes = x.shape[0]
            r = vector.elementwise(ins.op0, x,
                                   self.scalar(ins.operand0, ins.imm0, lanes, w)[:, None])
            if ins.op1 != VectorOp.COPY:
                r = vector.elementwise(ins.op1, r,
                                       self.scalar(ins.operand1, ins.imm1, lanes, w)[:, None])
            self.write32(ins.dst, r, draw, w)
        elif cls is TensorTensorScan:
            self.write32(ins.dst, self.scan(ins, w), draw, w)
        elif cls is TensorReduce:
            x = self.read32(ins.src)
            lanes, n = x.shape
            last = np.zeros(n, dtype=bool)
            last[-1] = True
            r = vector.run(VectorParams(lanes=lanes), ins.op, x.T, last=last,
                           reduce=ins.reduce)
            self.write32(ins.dst, r.T)
        elif cls is TensorCopyDynamic:
            self.write32(ins.dst, self.copied32(self.moved_source(ins), w), draw, w)
        elif cls is TensorCopy:
            self.write32(ins.dst, self.copied32(ins.src, w), draw, w)
        elif cls in _SELECTIONS:
            self._selection(stream, ins)
        elif cls is QuantizeMx:
            self.quantize_mx(ins)
        elif cls is StreamShuffle:  # partitions moved within quadrants, bits as they are
            src = self.read(ins.src).reshape(ins.src.partitions, -1)
            out = self.read(ins.dst).reshape(ins.dst.partitions, -1)
            for j in range(ins.dst.partitions):
                m = ins.shuffle[j % isa.SHUFFLE_LANES]
                if m != isa.SHUFFLE_KEEP:
                    out[j] = src[j - j % isa.SHUFFLE_LANES + m]
            self.write(ins.dst, out)
        elif cls is Transpose:  # the vector engine's: the elements' bits as they are
            self.write(ins.dst, self.read(ins.src).reshape(ins.src.partitions, -1).T.copy())
        elif cls is Memset:
            self.write32(ins.dst, np.full((ins.dst.partitions, ins.dst.free),
                                          np.float32(ins.value).view(np.uint32)))
        elif cls is Iota:
            p = np.arange(ins.dst.partitions, dtype=np.int64)[:, None]
            i = np.arange(ins.dst.free, dtype=np.int64)[None, :]
            v = ins.base + p * ins.pstep + i * ins.step
            if ins.dst.dtype in ("int32", "uint32"):
                self.write(ins.dst, (v & 0xFFFFFFFF).astype(np.uint32))
            else:
                self.write32(ins.dst, v.astype(np.float32).view(np.uint32))


def unit_beats(kind: str, ins: Instruction, params) -> tuple[str, int, int]:
    """``(unit, lanes, beats)``: the unit of the engine of ``kind`` that ``ins`` streams
    through, its lanes and the output beats ``ins`` takes of it, each of which advances every
    lane's generator once, as the core RTL's units do (:mod:`hdl.core.engines`,
    :mod:`hdl.core.scalar`).

    The vector and GpSimd engines: one unit each of a lane per partition (the tile's
    ``j``-th partition on lane ``j``), a beat per element of ``dst``; a reduction one beat
    (its one row), a memset, a transpose, a shuffle, a sequence's bounds and the nonzero
    positions none (they bypass the unit), a ``Max8`` one per element of ``src`` and then
    its 8 (its search streams the source through the unit, its 8 go through it into
    ``dst``), a
    ``FindIndex8`` one per element of ``data`` (its search) and a ``MatchReplace8`` two (its
    search, then its copy). The
    scalar engine: its activation unit for ``Activation`` and its vector unit for the rest,
    each of ``activation_lanes`` lanes serving the tile's partitions in turns, a beat per
    element each turn. The tensor engine and DMA round nothing: no beats."""
    if kind in ("vector", "gpsimd"):
        if isinstance(ins, Memset | Transpose | StreamShuffle | SequenceBounds
                      | NonzeroWithCount):
            return kind, params.partitions, 0
        if isinstance(ins, Max8):
            return kind, params.partitions, ins.src.free + ins.dst.free
        if isinstance(ins, FindIndex8 | MatchReplace8):
            searches = 2 if isinstance(ins, MatchReplace8) else 1
            return kind, params.partitions, searches * ins.data.free
        return kind, params.partitions, 1 if isinstance(ins, TensorReduce) else ins.dst.free
    if kind == "scalar":
        lanes = params.activation_lanes
        turns = -(-ins.dst.partitions // lanes)
        unit = "scalar.activation" if isinstance(ins, Activation) else "scalar.vector"
        return unit, lanes, turns * ins.dst.free
    return kind, 0, 0
