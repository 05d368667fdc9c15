"""The rules of the core: what a program may do, checked before it runs and, for the
stationary a multiply reads, while it runs.

Before anything runs, :meth:`Rules.check` checks every instruction against the documented
rules [NKI2, ISA]: which engine reaches which memory, tile limits, partition-start alignment,
bounds of SBUF, PSUM and HBM, PSUM bank overflow, operand shapes and formats, the
array's tiling (a stationary's tile position and size by
:func:`sim.golden.systolic_cycles.place`; a multiply writes the PSUM partitions of its tile's
columns, array column ``col + j`` into partition ``col + j``), the fp8 double row
(``double_row``: a double-rate format, the pair axis, the whole width; the one form of a
contraction deeper than the PE rows), and stochastic rounding on a chip without it
(``CoreParams.rng`` None). While it runs, :meth:`Rules.partners` decides whether a multiply
may read the loaded stationary and :meth:`Rules.bad_multiply` names why not: no stationary
loaded, one whose format its tile's does not take or whose double row its tile's is not
(:func:`sim.golden.systolic_cycles.check_formats`). Every error is a :class:`ProgramError` naming
the stream, the index, the instruction's text form and the rule (:func:`fail`).
"""

from __future__ import annotations

from functools import cache

from hdl.core import isa
from hdl.core.isa import (
    AP,
    FREE_MAX,
    Activation,
    DmaCopy,
    Instruction,
    LoadStationary,
    MultiplyMoving,
    SemSignal,
    SemWait,
    StreamShuffle,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    TensorTensorScan,
    Transpose,
)
from hdl.core.params import CoreParams
from hdl.vector.ops import ENGINE_ONLY_OPS, Reduce, VectorOp
from sim.golden import systolic_cycles

from .program import Program

__all__ = ["REACH", "ProgramError", "Rules", "extent", "fail", "matmul_results", "shares_pes"]

#: Memories each kind of engine reaches [NKI2, ISA].
REACH = {"tensor": ("sbuf", "psum"), "vector": ("sbuf", "psum"), "scalar": ("sbuf", "psum"),
         "gpsimd": ("sbuf",), "dma": ("hbm", "sbuf")}


def matmul_results(params, dtype: str) -> tuple[str, ...]:
    """The PSUM types a multiply of moving type ``dtype`` writes on a core of ``params``:
    int32 for int8, else fp32, or bf16 on NeuronCore-v4 on [NKI ``nc_matmul``: "Starting
    NeuronCore-v4, dst can either be a float32 or bfloat16 tile"]."""
    if dtype == "int8":
        return ("int32",)
    return ("fp32", "bf16") if params.generation >= 4 else ("fp32",)


class ProgramError(ValueError):
    """A program that breaks a rule of the core; the message names where and which, and
    ``at`` is (stream, instruction index) where one instruction breaks it, else None;
    ``rule`` and ``detail`` the parts of the message :func:`fail` made."""

    def __init__(self, message: str, at: tuple[str, int] | None = None, rule: str = "",
                 detail: str = ""):
        super().__init__(message)
        self.at, self.rule, self.detail = at, rule, detail


def fail(stream: str, index: int, ins: Instruction | None, rule: str, detail: str):
    """Raise the :class:`ProgramError` of instruction ``index`` of ``stream`` (``ins``, or None
    for the stream as a whole) breaking ``rule``: ``stream[index] `text form`: rule: detail``."""
    where = f"{stream}[{index}]" + (f" `{isa.format_instruction(ins)}`" if ins else "")
    raise ProgramError(f"{where}: {rule}: {detail}", (stream, index) if ins else None, rule,
                       detail)


@cache
def extent(dims: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """The lowest and highest element offsets of an access pattern's free ``dims`` ((size,
    stride) pairs) from its start; (0, -1) when it has no element."""
    lo = hi = 0
    for n, s in dims:
        if n < 1:
            return 0, -1
        if s >= 0:
            hi += (n - 1) * s
        else:
            lo += (n - 1) * s
    return lo, hi


def _partition_start_ok(start: int, count: int) -> bool:
    """A tile of more than 64 partitions starts at 0; 33-64 at 0 or 64; up to 32 at a
    multiple of 32 [NKI2]."""
    if count > 64:
        return start == 0
    if count > 32:
        return start in (0, 64)
    return start % 32 == 0


def shares_pes(a: systolic_cycles.Load, b: systolic_cycles.Load) -> bool:
    """Whether two placed tiles share PEs."""
    return (a.row < b.row + b.row_size and b.row < a.row + a.row_size
            and a.col < b.col + b.col_size and b.col < a.col + a.col_size)


class Rules:
    """The rules of one NeuronCore of ``params``. It keeps the instructions that passed, each
    stationary's tile by its shape and each pair of formats the array refuses, so that a
    program run again is checked at the cost of a look-up."""

    def __init__(self, params: CoreParams):
        self.params = params
        self.bytes = {"sbuf": params.sbuf_bytes, "psum": params.psum_bytes}
        self._checked: dict = {}  # (engine kind, id, HBM size) of instructions that passed
        self._placed: dict[tuple, systolic_cycles.Load] = {}  # a stationary's tile, by its shape
        self._mixes: dict[tuple[str, str], str | None] = {}  # (tile, multiply) format: why not

    # --- static rules -------------------------------------------------------------------
    def _check_selection(self, where, ins: Instruction) -> None:
        """The 8-wide searches, the random draws and the gather: one partition count, 8
        elements a partition where they take or give 8, a search over 8 .. 16,384
        elements, indices in uint32 (or int32), and generators to draw from [NKI]."""
        aps = {name: ap for name, ap, _ in ins.operands()}
        parts = aps["dst"].partitions
        for name, ap in aps.items():
            if ap.partitions != parts:
                fail(*where, "operand shape", f"{name} has {ap.partitions} partitions, dst "
                                              f"{parts}")
        searched = {isa.Max8: "src", isa.FindIndex8: "data", isa.MatchReplace8: "data"}
        eight = {isa.Max8: ("dst",), isa.FindIndex8: ("dst", "vals"),
                 isa.MatchReplace8: ("vals", "dst_idx")}
        indices = {isa.FindIndex8: ("dst",), isa.MatchReplace8: ("dst_idx",),
                   isa.GatherFlattened: ("indices",)}
        kind = type(ins)
        if kind in searched and not 8 <= aps[searched[kind]].free <= 16384:
            fail(*where, "operand shape", f"a search reads 8 .. 16,384 elements a partition, "
                                          f"not {aps[searched[kind]].free}")
        for name in eight.get(kind, ()):
            if name in aps and aps[name].free != 8:
                fail(*where, "operand shape", f"{name} holds 8 elements a partition, not "
                                              f"{aps[name].free}")
        for name in indices.get(kind, ()):
            if name in aps and aps[name].dtype not in ("uint32", "int32"):
                fail(*where, "format", f"{name} holds uint32 indices, not {aps[name].dtype}")
        if kind is isa.MatchReplace8:
            self._check_same(where, ins.dst, ins.data, "dst and data")
        if kind is isa.Dropout:
            self._check_same(where, ins.dst, ins.src, "dst and src")
            self._check_scalar(where, "prob", ins.prob, ins.src)
        if kind is isa.GatherFlattened and (ins.dst.free != ins.indices.free
                                            or ins.dst.dtype != ins.src.dtype):
            fail(*where, "operand shape", "a gather writes one element of src's type per "
                                          "index")
        if isa.draws_random(ins) and self.params.rng is None:
            fail(*where, "generator", f"{self.params.name}'s engines have no random "
                                      f"generators (its spec's rounding has no stochastic "
                                      f"mode)")

    @staticmethod
    def _check_shuffle(where, ins: StreamShuffle) -> None:
        """A shuffle copies one type, as many elements a partition, from partitions ``src``
        has, both tiles starting where a tile of the partitions both span may [NKI]."""
        src, dst = ins.src, ins.dst
        if src.dtype != dst.dtype or src.free != dst.free:
            fail(*where, "operand shape", f"a shuffle copies {src.free} {src.dtype} elements "
                                          f"a partition into {dst.free} {dst.dtype}")
        if len(ins.shuffle) != isa.SHUFFLE_LANES or any(
                not (0 <= m < isa.SHUFFLE_LANES or m == isa.SHUFFLE_KEEP) for m in ins.shuffle):
            fail(*where, "shuffle", f"{isa.SHUFFLE_LANES} entries of 0 .. "
                                    f"{isa.SHUFFLE_LANES - 1} or {isa.SHUFFLE_KEEP} (keep)")
        for j in range(dst.partitions):
            m = ins.shuffle[j % isa.SHUFFLE_LANES]
            if m != isa.SHUFFLE_KEEP and j - j % isa.SHUFFLE_LANES + m >= src.partitions:
                fail(*where, "shuffle", f"dst partition {j} takes src partition "
                                        f"{j - j % isa.SHUFFLE_LANES + m} of {src.partitions}")
        active = -(-max(src.partitions, dst.partitions) // isa.SHUFFLE_LANES) * isa.SHUFFLE_LANES
        for name, ap in (("src", src), ("dst", dst)):
            if not _partition_start_ok(ap.partition, active):
                fail(*where, "start partition", f"a shuffle over {active} partitions cannot "
                                                f"start {name} at partition {ap.partition}")

    @staticmethod
    def _check_index(where, ins: DmaCopy) -> None:
        """An indirect copy's index: integers in SBUF, a partition for each of the copy's
        (one element with ``index_stride``), and the side it picks rows of in HBM."""
        side = ins.dst if ins.index_dst else ins.src
        name = "dst" if ins.index_dst else "src"
        if ins.index.space != "sbuf" or ins.index.dtype not in ("int32", "uint32"):
            fail(*where, "index", f"an indirect DMA's index is int32 or uint32 in SBUF, not "
                                  f"{ins.index.dtype} in {ins.index.space.upper()}")
        if ins.index_stride:
            if ins.index.partitions != 1 or ins.index.free != 1:
                fail(*where, "index", f"a DMA at one run-time index reads one element, not "
                                      f"{ins.index.partitions} x {ins.index.free}")
            if ins.index_stride % side.itemsize:
                fail(*where, "alignment", f"index_stride {ins.index_stride} is not a multiple "
                                          f"of {name}'s {side.itemsize}-byte elements")
        elif ins.index.partitions != ins.dst.partitions:
            fail(*where, "index", f"an indirect DMA's index has a partition for each of the "
                                  f"copy's {ins.dst.partitions}, not {ins.index.partitions}")
        if side.space != "hbm" or ins.rows < 1:
            fail(*where, "index", f"an indirect DMA picks rows of an HBM tensor ({name} is "
                                  f"in {side.space.upper()}, rows {ins.rows})")

    def _check_ap(self, where, name: str, ap: AP, kind: str, hbm_bytes: int) -> None:
        stream, index, ins = where
        p = self.params
        if ap.space not in REACH[kind]:
            fail(stream, index, ins, "engine reach",
                 f"the {kind} engine cannot reach {ap.space.upper()} ({name})")
        if ap.offset % ap.itemsize or ap.pstride % ap.itemsize:
            fail(stream, index, ins, "alignment",
                 f"{name} offset {ap.offset} is not a multiple of its {ap.itemsize}-byte "
                 f"elements")
        lo, hi = extent(ap.dims)
        if ap.space == "hbm":
            first = ap.offset + lo * ap.itemsize
            last = ap.offset + (ap.partitions - 1) * ap.pstride + (hi + 1) * ap.itemsize
            if first < 0 or last > hbm_bytes:
                fail(stream, index, ins, "HBM bounds",
                     f"{name} spans bytes {first} .. {last} of the program's {hbm_bytes}")
            return
        if ap.partition + ap.partitions > p.partitions:
            fail(stream, index, ins, "partition bounds",
                 f"{name} spans partitions {ap.partition} .. "
                 f"{ap.partition + ap.partitions - 1}, the core has {p.partitions}")
        first, last = ap.offset + lo * ap.itemsize, ap.offset + (hi + 1) * ap.itemsize
        size = self.bytes[ap.space]
        if first < 0 or last > size:
            fail(stream, index, ins, f"{ap.space.upper()} bounds",
                 f"{name} spans bytes {first} .. {last} of a {size}-byte partition")
        # an MX tile's scales are read at its groups' partitions from the operand's first
        # (:func:`~hdl.core.isa.mx_scale_partition`), which may lie within a quadrant
        if kind != "dma" and name != "scale" \
                and not _partition_start_ok(ap.partition, ap.partitions):
            fail(stream, index, ins, "partition start",
                 f"a tile of {ap.partitions} partitions cannot start at partition "
                 f"{ap.partition} (more than 64 start at 0; 33-64 at 0 or 64; up to 32 at a "
                 f"multiple of 32)")
        if kind in ("vector", "scalar", "gpsimd") and ap.free > FREE_MAX[ap.space]:
            fail(stream, index, ins, "tile limit",
                 f"{name} has {ap.free} elements per partition, {ap.space.upper()} tiles "
                 f"take at most {FREE_MAX[ap.space]}")

    def _check_bank(self, where, name: str, ap: AP) -> None:
        bank = self.params.psum_bank_bytes
        lo, hi = extent(ap.dims)
        first, last = ap.offset + lo * ap.itemsize, ap.offset + (hi + 1) * ap.itemsize - 1
        if first // bank != last // bank:
            fail(*where, "PSUM bank overflow",
                 f"{name} spans bytes {first} .. {last}, across the {bank}-byte bank "
                 f"boundary at {(first // bank + 1) * bank}")

    def _check_same(self, where, a: AP, b: AP, what: str) -> None:
        if a.partitions != b.partitions or a.free != b.free:
            fail(*where, "operand shape",
                 f"{what}: {a.partitions} x {a.free} against {b.partitions} x {b.free}")

    def _check_scalar(self, where, name: str, ap: AP | None, src: AP) -> None:
        if ap is not None and (ap.partitions != src.partitions or ap.free != 1):
            fail(*where, "operand shape",
                 f"{name} must hold one element per partition of the {src.partitions}, "
                 f"not {ap.partitions} x {ap.free}")

    def check(self, program: Program) -> None:
        """Raise :class:`ProgramError` for the first instruction that breaks a static rule."""
        for stream, instructions in program.streams.items():
            try:
                kind = isa.engine_kind(stream)
            except isa.IsaError as err:
                raise ProgramError(f"{stream}: {err}") from None
            if kind == "dma" and int(stream[3:]) >= self.params.dma_queues:
                raise ProgramError(f"{stream}: the core has DMA queues dma0 .. "
                                   f"dma{self.params.dma_queues - 1}")
            for index, ins in enumerate(instructions):
                self._check_one(stream, kind, index, ins, program.hbm_bytes)

    def _check_one(self, stream: str, kind: str, index: int, ins: Instruction,
                   hbm_bytes: int) -> None:
        key = (kind, id(ins), hbm_bytes)
        if key in self._checked:
            return
        self._check_rules(stream, kind, index, ins, hbm_bytes)
        self._checked[key] = ins  # holds the object, so that its id stays its own

    def _check_rules(self, stream: str, kind: str, index: int, ins: Instruction,
                     hbm_bytes: int) -> None:
        where = (stream, index, ins)
        p = self.params
        if not isinstance(ins, isa.ENGINE_OPS[kind]):
            fail(*where, "engine", f"the {kind} engine does not run {type(ins).__name__}")
        if isinstance(ins, SemSignal | SemWait):
            return
        if getattr(ins, "rounding", "rne") != "rne" and p.rng is None:
            fail(*where, "rounding", f"{p.name} rounds to nearest even only (its spec's "
                                     f"rounding.modes have no {ins.rounding} rounding)")
        for name, ap, _ in isa.reach(ins):
            self._check_ap(where, name, ap, kind, hbm_bytes)
        # [NKI nl.abs_max, nl.abs_min: "Available only on NeuronCore-v4 (trn3) and newer"]
        # [NKI: power and rsqrt on GpSimd, reciprocal on the Vector Engine]
        for name in ("op", "op0", "op1"):
            op = getattr(ins, name, None)
            if op in ENGINE_ONLY_OPS and kind != ENGINE_ONLY_OPS[op]:
                fail(*where, "op", f"{op.name.lower()} runs on the {ENGINE_ONLY_OPS[op]} "
                                   f"engine, not the {kind} engine")
            if op in (VectorOp.ABS_MAX, VectorOp.ABS_MIN) and p.generation < 4:
                fail(*where, "op", f"{p.name}'s engines (NeuronCore-{p.version}) have no "
                                   f"{op.name.lower()}, NeuronCore-v4 on has")
        if kind in ("vector", "scalar", "gpsimd") and not isinstance(ins, isa.QuantizeMx):
            for name, ap, _ in ins.operands():
                if ap.dtype in isa.MX_DTYPES:
                    fail(*where, "format",
                         f"the {kind} engine does not compute on {ap.dtype} ({name}): MX "
                         f"quads are moved by DMA and read by the tensor engine")
        if isinstance(ins, LoadStationary):
            fmt, k = isa.input_format(ins.src.dtype), ins.src.partitions
            self._check_format(where, fmt)
            m = self._check_double_row(where, ins)
            self._check_scale(where, ins.src, ins.scale)
            if k > p.rows or ins.row + k > p.rows or m + ins.col > p.cols:
                deeper = ("; the double row contracts twice the rows: src [partitions, 2, "
                          "free] with double_row" if k > p.rows and self._double(fmt)
                          and not ins.double_row else "")
                fail(*where, "tile limit",
                     f"a stationary of {k} partitions x {m} at tile position ({ins.row}, "
                     f"{ins.col}) does not fit the {p.rows}-row, {p.cols}-wide array"
                     + deeper)
            try:  # the array's tiling: the rule of its cycle model, the spec's double row
                systolic_cycles.place(p.tensor, self.placement(ins))
            except ValueError as err:
                fail(*where, "tile position", str(err))
        elif isinstance(ins, MultiplyMoving):
            self._check_format(where, isa.input_format(ins.src.dtype))
            n = self._check_double_row(where, ins)
            self._check_scale(where, ins.src, ins.scale)
            if n > p.moving_max:
                fail(*where, "tile limit", f"moving free size {n} exceeds "
                                           f"{p.moving_max} (one PSUM bank of fp32)")
            acc = matmul_results(p, ins.src.dtype)
            if ins.dst.space != "psum" or ins.dst.dtype not in acc:
                fail(*where, "format", f"a matmul writes {' or '.join(acc)} to PSUM, not "
                                       f"{ins.dst.dtype} to {ins.dst.space.upper()}")
            if ins.dst.free != n:
                fail(*where, "operand shape", f"dst has {ins.dst.free} elements per "
                                              f"partition, the moving tile {n}")
            self._check_columns(where, ins.col, ins.dst)
            self._check_bank(where, "dst", ins.dst)
        elif isinstance(ins, Transpose) and kind == "vector":
            t = p.vector_transpose
            if ins.src.partitions > t or ins.src.free > t:
                fail(*where, "tile limit", f"a vector-engine transpose of "
                                           f"{ins.src.partitions} x {ins.src.free} exceeds "
                                           f"{t} x {t}")
            if ins.dst.dtype != ins.src.dtype:
                fail(*where, "format", f"a transpose writes its input's format "
                                       f"({ins.src.dtype}), not {ins.dst.dtype}")
            if (ins.dst.partitions, ins.dst.free) != (ins.src.free, ins.src.partitions):
                fail(*where, "operand shape", f"dst must be {ins.src.free} x "
                                              f"{ins.src.partitions}")
        elif isinstance(ins, Transpose):
            if ins.src.dtype in isa.MX_DTYPES:
                fail(*where, "format", "the array has no transpose of an MX tile (its "
                                       "scales belong to blocks along K)")
            if ins.src.partitions > p.rows or ins.src.free > p.cols:
                fail(*where, "tile limit", f"a transpose of {ins.src.partitions} x "
                                           f"{ins.src.free} exceeds {p.rows} x {p.cols}")
            if ins.dst.space != "psum" or ins.dst.dtype != ins.src.dtype:
                fail(*where, "format", f"a transpose writes its input's format to PSUM "
                                       f"({ins.src.dtype}), not {ins.dst.dtype} to "
                                       f"{ins.dst.space.upper()}")
            if (ins.dst.partitions, ins.dst.free) != (ins.src.free, ins.src.partitions):
                fail(*where, "operand shape", f"dst must be {ins.src.free} x "
                                              f"{ins.src.partitions}")
            self._check_format(where, ins.src.dtype)
            self._check_columns(where, 0, ins.dst)  # the pass's tile takes the whole array
            self._check_bank(where, "dst", ins.dst)
        elif isinstance(ins, DmaCopy):
            if ins.dst.shape != ins.src.shape:
                fail(*where, "operand shape", f"dst {ins.dst.shape} and src {ins.src.shape}"
                                              f" differ")
            if (ins.dst.dtype != ins.src.dtype or ins.add) and not \
                    {ins.dst.dtype, ins.src.dtype} <= set(isa.DMA_CAST_DTYPES):
                fail(*where, "format", f"a DMA converts between "
                                       f"{', '.join(isa.DMA_CAST_DTYPES)}: {ins.src.dtype} "
                                       f"cannot become {ins.dst.dtype}")
            if ins.index is not None:
                self._check_index(where, ins)
            if ins.add and ins.dst.dtype not in isa.DMA_ADD_DTYPES:
                fail(*where, "format", f"a DMA adds into {', '.join(isa.DMA_ADD_DTYPES)} "
                                       f"elements, not {ins.dst.dtype}")
        elif isinstance(ins, isa.DmaCompute):
            for name, ap, _ in ins.operands():
                if ap.shape != ins.dst.shape or ap.dtype not in isa.DMA_CAST_DTYPES:
                    fail(*where, "operand shape", f"a DMA sums operands of one shape, of "
                                                  f"{', '.join(isa.DMA_CAST_DTYPES)}: {name} "
                                                  f"{ap.shape} {ap.dtype}, dst "
                                                  f"{ins.dst.shape}")
        elif isinstance(ins, StreamShuffle):
            self._check_shuffle(where, ins)
        elif isinstance(ins, isa.LocalGather):
            s, d, i = ins.src, ins.dst, ins.indices
            if s.partitions % 16 or {d.partitions, i.partitions} != {s.partitions} or \
                    i.dtype != "uint16" or ins.per not in (1, 2, 4, 8, 16, 32) or \
                    not 0 < ins.valid <= i.free * 16 or d.free != ins.valid * ins.per or \
                    d.dtype != s.dtype:
                fail(*where, "operand shape", f"a local gather: partitions a multiple of 16 "
                                              f"alike, uint16 indices, 1 .. 32 elements "
                                              f"each (a power of 2), at most the group's "
                                              f"indices, dst valid x per of src's type; not "
                                              f"src {s.partitions} x {s.free} {s.dtype}, "
                                              f"indices {i.partitions} x {i.free} {i.dtype}, "
                                              f"dst {d.partitions} x {d.free} {d.dtype}, "
                                              f"per {ins.per}, valid {ins.valid}")
        elif isinstance(ins, isa.RangeSelect):
            self._check_same(where, ins.dst, ins.src, "dst and src")
            for name in ("bound0", "bound1"):
                self._check_scalar(where, name, getattr(ins, name), ins.src)
            comparisons = (VectorOp.IS_EQUAL, VectorOp.LESS, VectorOp.LESS_EQUAL,
                           VectorOp.GREATER, VectorOp.GREATER_EQUAL)
            if ins.op0 not in comparisons or ins.op1 not in comparisons:
                fail(*where, "op", "a range select compares with equal, less, less_equal, "
                                   "greater or greater_equal")
            if p.generation < 3:
                fail(*where, "engine", f"{p.name}'s vector engine (NeuronCore-{p.version}) "
                                       f"has no range select, NeuronCore-v3 on has")
        elif isinstance(ins, isa.AffineSelect):
            self._check_same(where, ins.dst, ins.src, "dst and src")
            if ins.op not in (VectorOp.IS_EQUAL, VectorOp.NOT_EQUAL, VectorOp.LESS,
                              VectorOp.LESS_EQUAL, VectorOp.GREATER, VectorOp.GREATER_EQUAL):
                fail(*where, "op", "an affine select compares with equal, not_equal, less, "
                                   "less_equal, greater or greater_equal")
        elif isinstance(ins, isa.QuantizeMx):
            s, d = ins.src, ins.dst
            if p.generation < 4:
                fail(*where, "engine", f"{p.name}'s vector engine (NeuronCore-{p.version}) "
                                       f"has no MX quantization, NeuronCore-v4 on has")
            if s.dtype not in ("bf16", "fp16") or d.dtype not in isa.QUANTIZE_MX_DTYPES or \
                    s.space != "sbuf" or d.space != "sbuf" or s.partitions != d.partitions \
                    or s.partitions % isa.MX_QUADRANT or s.free != isa.MX_QUAD * d.free:
                fail(*where, "operand shape",
                     f"src bf16 or fp16 and dst {' or '.join(isa.QUANTIZE_MX_DTYPES)} in SBUF, "
                     f"of the same partitions (a multiple of {isa.MX_QUADRANT}), src "
                     f"{isa.MX_QUAD} elements for each of "
                     f"dst's: src {s.partitions} x {s.free} {s.dtype} in {s.space.upper()}, "
                     f"dst {d.partitions} x {d.free} {d.dtype} in {d.space.upper()}")
            self._check_scale(where, d, ins.scale)
        elif isinstance(ins, isa.NonzeroWithCount):
            s, d = ins.src, ins.dst
            if s.dtype not in ("fp32", "int32") or d.dtype != "int32" or \
                    s.partitions != d.partitions or d.free != s.free + 1 or \
                    s.space != "sbuf" or d.space != "sbuf":
                fail(*where, "operand shape", f"src fp32 or int32 and dst int32 in SBUF, of "
                                              f"the same partitions, dst one element longer: "
                                              f"src {s.partitions} x {s.free} {s.dtype} in "
                                              f"{s.space.upper()}, dst {d.partitions} x "
                                              f"{d.free} {d.dtype} in {d.space.upper()}")
            if p.generation < 3:
                fail(*where, "engine", f"{p.name}'s GpSimd engine (NeuronCore-{p.version}) has "
                                       f"no nonzero search, NeuronCore-v3 on has")
        elif isinstance(ins, isa.SequenceBounds):
            s, d = ins.src, ins.dst
            if s.partitions != 1 or d.partitions != 1 or d.free != 2 * s.free or \
                    {s.dtype, d.dtype} - {"fp32", "int32"}:
                fail(*where, "operand shape", f"segment ids of one partition, fp32 or int32, "
                                              f"and twice as many bounds: src {s.partitions} "
                                              f"x {s.free} {s.dtype}, dst {d.partitions} x "
                                              f"{d.free} {d.dtype}")
        elif isinstance(ins, isa.TensorCopyDynamic):
            self._check_same(where, ins.dst, ins.src, "dst and src")
            o = ins.offset
            if o.space != "sbuf" or o.dtype not in ("int32", "uint32") or \
                    o.partitions != 1 or o.free != 1 or ins.count < 1:
                fail(*where, "dynamic offset", f"one int32 or uint32 in SBUF, and a count of "
                                               f"places, not {o.partitions} x {o.free} "
                                               f"{o.dtype} in {o.space.upper()} and "
                                               f"{ins.count}")
        elif isinstance(ins, isa.Max8 | isa.FindIndex8 | isa.MatchReplace8 | isa.Random
                        | isa.Dropout | isa.GatherFlattened):
            self._check_selection(where, ins)
        elif isinstance(ins, Activation):
            self._check_same(where, ins.dst, ins.src, "dst and src")
            self._check_scalar(where, "bias", ins.bias, ins.src)
            self._check_scalar(where, "reduce_dst", ins.reduce_dst, ins.src)
            if ins.func >= len(p.functions):
                fail(*where, "function", f"func {ins.func} is not one of the "
                                         f"{len(p.functions)} functions of {p.name}")
            elif kind == "vector" and p.functions[ins.func].name not in p.vector_functions:
                fail(*where, "function", f"the vector engine of {p.name} evaluates "
                                         f"{', '.join(p.vector_functions) or 'no function'}, "
                                         f"not {p.functions[ins.func].name}")
        elif isinstance(ins, TensorTensor):
            self._check_same(where, ins.dst, ins.a, "dst and a")
            self._check_same(where, ins.dst, ins.b, "dst and b")
        elif isinstance(ins, TensorTensorScan):
            self._check_same(where, ins.dst, ins.a, "dst and a")
            self._check_same(where, ins.dst, ins.b, "dst and b")
            self._check_scalar(where, "initial", ins.initial, ins.a)
            if ins.a.space == ins.b.space == "psum":
                fail(*where, "operand shape", "a scan reads at most one of a and b from "
                                              "PSUM")
        elif isinstance(ins, TensorScalar):
            self._check_same(where, ins.dst, ins.src, "dst and src")
            self._check_scalar(where, "operand0", ins.operand0, ins.src)
            self._check_scalar(where, "operand1", ins.operand1, ins.src)
        elif isinstance(ins, TensorReduce):
            self._check_scalar(where, "dst", ins.dst, ins.src)
            if ins.reduce == Reduce.NONE:
                fail(*where, "operand shape", "a reduce needs reduce=sum or reduce=max")
        elif isinstance(ins, TensorCopy):
            self._check_same(where, ins.dst, ins.src, "dst and src")

    def _check_columns(self, where, col: int, dst: AP) -> None:
        """The array's output: column ``col + j`` of a tile at column position ``col`` sums
        into PSUM partition ``col + j``, so ``dst`` starts at the tile's first column."""
        if dst.partition != col:
            fail(*where, "tile position",
                 f"a stationary at column {col} writes PSUM partitions {col} .. "
                 f"{col + dst.partitions - 1} (its array columns), not dst's "
                 f"{dst.partition} .. {dst.partition + dst.partitions - 1}")

    def _double(self, fmt: str) -> bool:
        """Whether ``fmt`` (a format of the core) is one of the array's double-rate formats."""
        return fmt in self.params.formats and \
            self.params.tensor.is_double(self.params.array_format(fmt))

    def _check_double_row(self, where, ins: LoadStationary | MultiplyMoving) -> int:
        """The columns of a stationary or moving tile (its free size, half that for a double
        row), a double row checked: a double-rate format, the pair axis (``src``'s outermost
        free dimension, size 2), no column tiling (:class:`~hdl.core.isa.LoadStationary`)."""
        src = ins.src
        if not ins.double_row:
            return src.free
        fmt = isa.input_format(src.dtype)
        if not self._double(fmt):
            doubles = [f for f in self.params.formats if self._double(f)]
            fail(*where, "format",
                 f"the double row takes the double-rate formats of {self.params.name} "
                 f"({', '.join(doubles) or 'none'}), not {src.dtype}")
        if not src.dims or src.dims[0][0] != 2:
            fail(*where, "operand shape",
                 f"a double-row src is [partitions, 2, free]: its outermost free dimension "
                 f"(the pair axis) must have size 2, not shape {src.shape}")
        if ins.col:
            fail(*where, "tile position",
                 f"the double row takes the array's whole width (no column tiling), so "
                 f"col must be 0, not {ins.col}")
        return src.free // 2

    def _check_format(self, where, fmt: str) -> None:
        if fmt not in self.params.formats:
            fail(*where, "format", f"the tensor engine of {self.params.name} takes "
                                   f"{', '.join(self.params.formats)}, not {fmt}")

    def placement(self, ins: LoadStationary) -> systolic_cycles.Load:
        """The array's tile of a stationary, at its tile position, of the size the array's
        rule gives (:meth:`hdl.tensor.params.SystolicParams.tile_groups`, which the core
        RTL's decoder also runs): a double row (two contraction indices per PE row) takes
        the array's whole width."""
        key = (ins.src.dtype, ins.src.partitions, ins.src.free, ins.row, ins.col,
               ins.double_row)
        placed = self._placed.get(key)
        if placed is None:
            a = self.params.tensor
            fmt = self.params.array_format(isa.input_format(ins.src.dtype))
            k, m = ins.src.partitions, ins.src.free
            rows, cols = a.tile_groups(k, m, ins.double_row)
            if ins.double_row:
                k, m = 2 * k, m // 2
            placed = self._placed[key] = systolic_cycles.Load(
                k, m, fmt, row=ins.row, col=ins.col, row_size=rows * a.group_rows,
                col_size=cols * a.group_cols)
        return placed

    def _check_scale(self, where, src: AP, scale: AP | None) -> None:
        """An MX tile's scale operand: SBUF ``uint8``, one per column, its partitions
        reaching the partition of the tile's last group of 8
        (:func:`~hdl.core.isa.mx_scale_partition` from its first: for a tile of 32 partitions
        at most, one per group; for more, the quadrants' first partitions, the tile's own
        partitions or fewer where the operand starts within a quadrant, as NKI's packed
        scales of two tiles do [NKI ``quantize_mx``]); no scale with any other tile."""
        if src.dtype not in isa.MX_DTYPES:
            if scale is not None:
                fail(*where, "format", f"only an MX tile takes a scale, not {src.dtype}")
            return
        if scale is None:
            fail(*where, "format", f"an {src.dtype} tile needs its scale operand")
        groups = -(-src.partitions // isa.MX_GROUP_PARTITIONS)
        least = isa.mx_scale_partition(groups - 1) + 1
        if scale.dtype != "uint8" or scale.space != "sbuf":
            fail(*where, "format", f"MX scales are uint8 in SBUF, not {scale.dtype} in "
                                   f"{scale.space.upper()}")
        if not least <= scale.partitions <= max(src.partitions, groups) \
                or scale.free != src.free:
            fail(*where, "operand shape",
                 f"the scale of a {src.partitions} x {src.free} MX tile must be "
                 f"{least} to {max(src.partitions, groups)} partitions x {src.free}, not "
                 f"{scale.partitions} x {scale.free}")

    # --- while running ---------------------------------------------------------------------
    def bad_multiply(self, stream: str, index: int, ins: MultiplyMoving, stationary) -> None:
        if stationary is None:
            at = f" at tile position ({ins.row}, {ins.col})" if ins.row or ins.col else ""
            fail(stream, index, ins, "stationary", f"no stationary tile is loaded{at}")
        fmt, k, m, double_row = stationary[:4]
        if double_row != ins.double_row:
            fail(stream, index, ins, "stationary",
                 f"the loaded stationary is {'' if double_row else 'not '}a double row, the "
                 f"multiply is {'' if ins.double_row else 'not '}one (double_row="
                 f"{int(ins.double_row)})")
        why = self._mismatch(fmt, isa.input_format(ins.src.dtype))
        if k != ins.src.partitions or why:
            fail(stream, index, ins, "stationary",
                 f"the loaded stationary is {k} x {m} {fmt}, the moving tile has "
                 f"{ins.src.partitions} partitions of {ins.src.dtype}"
                 + (f" ({why})" if why else ""))
        fail(stream, index, ins, "operand shape",
             f"dst has {ins.dst.partitions} partitions, the stationary {m} columns")

    def partners(self, tile: str, fmt: str) -> bool:
        """Whether a multiply in ``fmt`` may read a stationary tile in ``tile``."""
        return tile == fmt or self._mismatch(tile, fmt) is None

    def _mismatch(self, tile: str, fmt: str) -> str | None:
        """Why a multiply in ``fmt`` may not read a stationary tile in ``tile`` (None: it
        may): the array's rule, :func:`sim.golden.systolic_cycles.check_formats` (one rate and
        kind; fp32 and tf32 with no other format; mxfp8 with mxfp4 is allowed [NKI4])."""
        if (tile, fmt) not in self._mixes:
            p, why = self.params, None
            try:
                systolic_cycles.check_formats(p.tensor, p.array_format(tile), p.array_format(fmt))
            except ValueError as err:
                why = str(err)
            self._mixes[(tile, fmt)] = why
        return self._mixes[(tile, fmt)]
