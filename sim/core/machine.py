"""The NeuronCore simulator: every engine's stream on SBUF, PSUM and HBM, timed and checked.

:class:`Core` runs a :class:`~sim.core.program.Program`:

* **Rules.** Before anything runs, every instruction is checked against the documented rules
  [NKI2, ISA]: which engine reaches which memory, tile limits, partition-start alignment,
  bounds of SBUF, PSUM and HBM, PSUM bank overflow, operand shapes and formats, the
  array's tiling (a stationary's tile position and size by
  :func:`sim.golden.systolic.place`; a multiply writes the PSUM partitions of its tile's
  columns, array column ``col + j`` into partition ``col + j``), the fp8 double row
  (``double_row``: a double-rate format, the pair axis, the whole width; the one form of a
  contraction deeper than the PE rows), and stochastic rounding on a chip without it
  (``CoreParams.rng`` None). While it runs: a multiply with no stationary loaded, one whose
  format its tile's does not take or whose double row its tile's is not
  (:func:`sim.golden.systolic.check_formats`); deadlock (every unfinished stream waiting),
  which is reported with the wait graph; and (by default in numeric mode) races, two streams
  touching the same bytes, one writing, with no semaphore ordering them (vector clocks).
  Every error is a :class:`ProgramError` naming the stream, the index, the instruction's text
  form and the rule.
* **Timing.** An event model on the engine of :mod:`sim.core.events`: each stream issues in
  order on its engine's own clock; costs come from :mod:`sim.core.costs`. The tensor
  engine is timed by the array's sequencer in closed form
  (:class:`sim.golden.systolic.Sequencer`, pinned to the RTL-checked cycle model): each
  instruction is accepted when the array can take it, so a load runs behind the multiply
  before it and tiles at disjoint tile positions (the array's row and column tiling) multiply
  at once; its busy time counts overlapping loads and multiplies once. A
  semaphore increment becomes visible ``semaphore_latency`` after every earlier instruction
  of its stream completed; a wait resumes when the count reaches its value. DMA queues are
  in order; transfers share the core's DMA bandwidth first come, first served. Engines that
  share a memory port (the spec's ``shared_ports``: on NeuronCore-v2 vector and GpSimd on
  SBUF, vector and scalar on PSUM) take turns.
* **Data** (unless ``timing_only``): results bit for bit through the unit golden models,
  :func:`sim.golden.systolic.matmul` (:func:`~sim.golden.systolic.matmul_mx` for the MX quad
  types), :mod:`sim.golden.vector`, :mod:`sim.golden.activation`
  and the casts of :mod:`sim.golden.numerics`.

**Against the core RTL** (:mod:`hdl.core`, co-simulated by ``sim/tb/core.py``): the data
are equal byte for byte. Per instruction, the RTL's cycles from decode to retirement against
this model's, :func:`rtl_cycle_bound`:

* ``MultiplyMoving`` of a format at full rate or above: **exact**. The model's latency (the
  RTL-checked array schedule of :func:`sim.golden.systolic.cycles`, acceptance to last row)
  plus one, plus :data:`RTL_MULTIPLY_STAGES`, the core's fixed stages around the array.
* Every other instruction of the tensor, vector, scalar and GpSimd engines: **at least**
  ``turns * N`` (the RTL streams one element of ``N`` per partition per lane per cycle) and
  **at most** ``turns * cycles + RTL_OVERHEAD``. ``cycles`` is this model's cost of the
  instruction on an idle engine; the RTL has none of the spec's fixed access costs
  (``access_start``, ``min_interval``), so it is faster except where it does less per
  cycle: ``turns`` is the scalar engine's turns over the tile's partitions
  (``activation_lanes`` at a time) for its instructions, the array's ``beat_columns`` for
  ``LoadStationary`` (the RTL reads one stationary column per cycle, the array takes that
  many per beat), 1 otherwise.
* A double row counts as its array's tile: ``2P`` contraction indices, ``N`` its columns
  (half its free size), as this model times it; the RTL reads both pairs of a column in one
  cycle.
* DMA: no bound. The RTL's AXI port moves four bytes per beat; the model's DMA is the chip's
  fabric, a microsecond of latency and its bandwidth, not a property of the port.
"""

from __future__ import annotations

import json
from bisect import insort
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from hdl.core import isa
from hdl.core.isa import (
    AP,
    Activation,
    DmaCopy,
    Instruction,
    Iota,
    LoadStationary,
    Memset,
    MultiplyMoving,
    SemSignal,
    SemWait,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    Transpose,
)
from hdl.core.params import CoreParams
from hdl.numerics.formats import format_by_name
from hdl.vector.activation import ActivationParams
from hdl.vector.ops import Reduce, VectorOp
from hdl.vector.vector import VectorParams
from sim.golden import activation, numerics, systolic, vector

from .costs import dma_seconds, stream_cycles, tensor_cycles
from .events import Agenda, Resources
from .program import Program

__all__ = ["RTL_MULTIPLY_STAGES", "RTL_OVERHEAD", "Core", "ProgramError", "Result",
           "rtl_cycle_bound"]

ENGINES = ("tensor", "vector", "scalar", "gpsimd")
#: Memories each kind of engine reaches [NKI2, ISA].
REACH = {"tensor": ("sbuf", "psum"), "vector": ("sbuf", "psum"), "scalar": ("sbuf", "psum"),
         "gpsimd": ("sbuf",), "dma": ("hbm", "sbuf")}
#: Largest free size of a vector/scalar/GpSimd tile, elements per partition [NKI2].
FREE_MAX = {"sbuf": 64 * 1024, "psum": 4 * 1024}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}


_WAIT, _SIGNAL, _LOAD, _MULTIPLY, _TRANSPOSE, _STREAM, _DMA = (
    "wait", "signal", "load", "multiply", "transpose", "stream", "dma")


#: Cycles of the core RTL around the array's multiply: the sequencer's hand-off and decode,
#: the command, the first SBUF read, the PSUM write after the last row and the retirement.
RTL_MULTIPLY_STAGES = 4
#: Cycles of the core RTL outside an engine's work: the sequencer's hand-off, the engine's
#: decode, operand reads before the stream and the write after it.
RTL_OVERHEAD = 8


def rtl_cycle_bound(params: CoreParams, kind: str, ins: Instruction,
                    cycles: float) -> tuple[float, float]:
    """The range of the core RTL's cycles (decode to retirement) for the compute instruction
    ``ins`` of an engine of ``kind`` that this model costs ``cycles`` of its engine's clock
    (see the module docstring)."""
    src = getattr(ins, "src", None) or getattr(ins, "a", None) or ins.dst
    if isinstance(ins, MultiplyMoving | LoadStationary):
        # a double row: twice the contraction, half the free axis in columns
        pairs = 2 if ins.double_row else 1
        columns = src.free // pairs
        c = tensor_cycles(params, isa.input_format(ins.src.dtype), pairs * src.partitions,
                          ins.dst.partitions if isinstance(ins, MultiplyMoving) else
                          columns, columns)
        if isinstance(ins, MultiplyMoving):
            if params.rate(isa.input_format(ins.src.dtype)) >= 1:
                exact = c["latency"] + 1 + RTL_MULTIPLY_STAGES
                return exact, exact
            return columns, c["latency"] + 1 + RTL_OVERHEAD
        return columns, params.tensor.beat_columns * c["load"] + RTL_OVERHEAD
    turns = 1
    if kind == "scalar":
        turns = -(-src.partitions // params.activation_lanes)
    return turns * src.free, turns * cycles + RTL_OVERHEAD


class ProgramError(ValueError):
    """A program that breaks a rule of the core; the message names where and which."""


def _fail(stream: str, index: int, ins: Instruction | None, rule: str, detail: str):
    where = f"{stream}[{index}]" + (f" `{isa.format_instruction(ins)}`" if ins else "")
    raise ProgramError(f"{where}: {rule}: {detail}")


@dataclass
class Result:
    """What a run produced: time, per-engine figures, work done and the trace."""

    time: float
    busy: dict[str, float]
    cycles: dict[str, float]
    instructions: dict[str, int]
    flops: float
    dma_bytes: int
    events: list[dict] = field(default_factory=list)
    #: The final SBUF and PSUM (partitions x bytes) in numeric mode, else None.
    sbuf: np.ndarray | None = None
    psum: np.ndarray | None = None

    def busy_fraction(self, stream: str) -> float:
        return self.busy[stream] / self.time if self.time else 0.0

    def trace_json(self) -> str:
        """The run as Chrome/Perfetto trace-event JSON (one track per engine and queue)."""
        names = sorted(self.busy, key=lambda s: (s.startswith("dma"), len(s), s))
        meta = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "NeuronCore"}}]
        meta += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": s}}
                 for i, s in enumerate(names)]
        meta += [{"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": i,
                  "args": {"sort_index": i}} for i in range(len(names))]
        tid = {s: i for i, s in enumerate(names)}
        events = [dict(e, pid=0, tid=tid[e.pop("stream")]) for e in
                  (dict(e) for e in self.events)]
        return json.dumps({"traceEvents": meta + events, "displayTimeUnit": "ns"})


@cache
def _extent(dims: tuple[tuple[int, int], ...]) -> tuple[int, int]:
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


class Core:
    """One NeuronCore of ``params``; :meth:`run` executes programs on it."""

    def __init__(self, params: CoreParams):
        self.params = params
        self.bytes = {"sbuf": params.sbuf_bytes, "psum": params.psum_bytes}
        self._stream_cache: dict = {}
        self._checked: dict = {}  # (engine kind, id, HBM size) of instructions that passed
        self._placed: dict[tuple, systolic.Load] = {}  # a stationary's tile, by its shape
        self._mixes: dict[tuple[str, str], str | None] = {}  # (tile, multiply) format: why not

    # --- static rules -------------------------------------------------------------------
    def _check_ap(self, where, name: str, ap: AP, kind: str, hbm_bytes: int) -> None:
        stream, index, ins = where
        p = self.params
        if ap.space not in REACH[kind]:
            _fail(stream, index, ins, "engine reach",
                  f"the {kind} engine cannot reach {ap.space.upper()} ({name})")
        if ap.offset % ap.itemsize or ap.pstride % ap.itemsize:
            _fail(stream, index, ins, "alignment",
                  f"{name} offset {ap.offset} is not a multiple of its {ap.itemsize}-byte "
                  f"elements")
        lo, hi = _extent(ap.dims)
        if ap.space == "hbm":
            first = ap.offset + lo * ap.itemsize
            last = ap.offset + (ap.partitions - 1) * ap.pstride + (hi + 1) * ap.itemsize
            if first < 0 or last > hbm_bytes:
                _fail(stream, index, ins, "HBM bounds",
                      f"{name} spans bytes {first} .. {last} of the program's {hbm_bytes}")
            return
        if ap.partition + ap.partitions > p.partitions:
            _fail(stream, index, ins, "partition bounds",
                  f"{name} spans partitions {ap.partition} .. "
                  f"{ap.partition + ap.partitions - 1}, the core has {p.partitions}")
        first, last = ap.offset + lo * ap.itemsize, ap.offset + (hi + 1) * ap.itemsize
        size = self.bytes[ap.space]
        if first < 0 or last > size:
            _fail(stream, index, ins, f"{ap.space.upper()} bounds",
                  f"{name} spans bytes {first} .. {last} of a {size}-byte partition")
        if kind != "dma" and not _partition_start_ok(ap.partition, ap.partitions):
            _fail(stream, index, ins, "partition start",
                  f"a tile of {ap.partitions} partitions cannot start at partition "
                  f"{ap.partition} (more than 64 start at 0; 33-64 at 0 or 64; up to 32 at a "
                  f"multiple of 32)")
        if kind in ("vector", "scalar", "gpsimd") and ap.free > FREE_MAX[ap.space]:
            _fail(stream, index, ins, "tile limit",
                  f"{name} has {ap.free} elements per partition, {ap.space.upper()} tiles "
                  f"take at most {FREE_MAX[ap.space]}")

    def _check_bank(self, where, name: str, ap: AP) -> None:
        bank = self.params.psum_bank_bytes
        lo, hi = _extent(ap.dims)
        first, last = ap.offset + lo * 4, ap.offset + (hi + 1) * 4 - 1
        if first // bank != last // bank:
            _fail(*where, "PSUM bank overflow",
                  f"{name} spans bytes {first} .. {last}, across the {bank}-byte bank "
                  f"boundary at {(first // bank + 1) * bank}")

    def _check_same(self, where, a: AP, b: AP, what: str) -> None:
        if a.partitions != b.partitions or a.free != b.free:
            _fail(*where, "operand shape",
                  f"{what}: {a.partitions} x {a.free} against {b.partitions} x {b.free}")

    def _check_scalar(self, where, name: str, ap: AP | None, src: AP) -> None:
        if ap is not None and (ap.partitions != src.partitions or ap.free != 1):
            _fail(*where, "operand shape",
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
            _fail(*where, "engine", f"the {kind} engine does not run {type(ins).__name__}")
        if isinstance(ins, SemSignal | SemWait):
            return
        if getattr(ins, "rounding", "rne") != "rne" and p.rng is None:
            _fail(*where, "rounding", f"{p.name} rounds to nearest even only (its spec's "
                                      f"rounding.modes have no {ins.rounding} rounding)")
        for name, ap, _ in ins.operands():
            self._check_ap(where, name, ap, kind, hbm_bytes)
        if kind in ("vector", "scalar", "gpsimd"):
            for name, ap, _ in ins.operands():
                if ap.dtype in isa.MX_DTYPES or ap.dtype == "uint8":
                    _fail(*where, "format",
                          f"the {kind} engine does not compute on {ap.dtype} ({name}): MX "
                          f"quads and their uint8 scales are moved by DMA and read by the "
                          f"tensor engine")
        if isinstance(ins, LoadStationary):
            fmt, k = isa.input_format(ins.src.dtype), ins.src.partitions
            self._check_format(where, fmt)
            m = self._check_double_row(where, ins)
            self._check_scale(where, ins.src, ins.scale)
            if k > p.rows or ins.row + k > p.rows or m + ins.col > p.cols:
                deeper = ("; the double row contracts twice the rows: src [partitions, 2, "
                          "free] with double_row" if k > p.rows and self._double(fmt)
                          and not ins.double_row else "")
                _fail(*where, "tile limit",
                      f"a stationary of {k} partitions x {m} at tile position ({ins.row}, "
                      f"{ins.col}) does not fit the {p.rows}-row, {p.cols}-wide array"
                      + deeper)
            try:  # the array's tiling: the rule of its cycle model, the spec's double row
                systolic.place(p.tensor, self._placement(ins))
            except ValueError as err:
                _fail(*where, "tile position", str(err))
        elif isinstance(ins, MultiplyMoving):
            self._check_format(where, isa.input_format(ins.src.dtype))
            n = self._check_double_row(where, ins)
            self._check_scale(where, ins.src, ins.scale)
            if n > p.moving_max:
                _fail(*where, "tile limit", f"moving free size {n} exceeds "
                                            f"{p.moving_max} (one PSUM bank of fp32)")
            acc = "int32" if ins.src.dtype == "int8" else "fp32"
            if ins.dst.space != "psum" or ins.dst.dtype != acc:
                _fail(*where, "format", f"a matmul writes {acc} to PSUM, not "
                                        f"{ins.dst.dtype} to {ins.dst.space.upper()}")
            if ins.dst.free != n:
                _fail(*where, "operand shape", f"dst has {ins.dst.free} elements per "
                                               f"partition, the moving tile {n}")
            self._check_columns(where, ins.col, ins.dst)
            self._check_bank(where, "dst", ins.dst)
        elif isinstance(ins, Transpose):
            if ins.src.dtype in isa.MX_DTYPES:
                _fail(*where, "format", "the array has no transpose of an MX tile (its "
                                        "scales belong to blocks along K)")
            if ins.src.partitions > p.rows or ins.src.free > p.cols:
                _fail(*where, "tile limit", f"a transpose of {ins.src.partitions} x "
                                            f"{ins.src.free} exceeds {p.rows} x {p.cols}")
            if ins.dst.space != "psum" or ins.dst.dtype != ins.src.dtype:
                _fail(*where, "format", f"a transpose writes its input's format to PSUM "
                                        f"({ins.src.dtype}), not {ins.dst.dtype} to "
                                        f"{ins.dst.space.upper()}")
            if (ins.dst.partitions, ins.dst.free) != (ins.src.free, ins.src.partitions):
                _fail(*where, "operand shape", f"dst must be {ins.src.free} x "
                                               f"{ins.src.partitions}")
            self._check_format(where, ins.src.dtype)
            self._check_columns(where, 0, ins.dst)  # the pass's tile takes the whole array
            self._check_bank(where, "dst", ins.dst)
        elif isinstance(ins, DmaCopy):
            if ins.dst.shape != ins.src.shape:
                _fail(*where, "operand shape", f"dst {ins.dst.shape} and src {ins.src.shape}"
                                               f" differ")
            if ins.dst.dtype != ins.src.dtype:
                _fail(*where, "format", f"a DMA copies bytes: {ins.src.dtype} cannot become "
                                        f"{ins.dst.dtype}")
        elif isinstance(ins, Activation):
            self._check_same(where, ins.dst, ins.src, "dst and src")
            self._check_scalar(where, "bias", ins.bias, ins.src)
            self._check_scalar(where, "reduce_dst", ins.reduce_dst, ins.src)
            if ins.func >= len(p.functions):
                _fail(*where, "function", f"func {ins.func} is not one of the "
                                          f"{len(p.functions)} functions of {p.name}")
        elif isinstance(ins, TensorTensor):
            self._check_same(where, ins.dst, ins.a, "dst and a")
            self._check_same(where, ins.dst, ins.b, "dst and b")
        elif isinstance(ins, TensorScalar):
            self._check_same(where, ins.dst, ins.src, "dst and src")
            self._check_scalar(where, "operand0", ins.operand0, ins.src)
            self._check_scalar(where, "operand1", ins.operand1, ins.src)
        elif isinstance(ins, TensorReduce):
            self._check_scalar(where, "dst", ins.dst, ins.src)
            if ins.reduce == Reduce.NONE:
                _fail(*where, "operand shape", "a reduce needs reduce=sum or reduce=max")
        elif isinstance(ins, TensorCopy):
            self._check_same(where, ins.dst, ins.src, "dst and src")

    def _check_columns(self, where, col: int, dst: AP) -> None:
        """The array's output: column ``col + j`` of a tile at column position ``col`` sums
        into PSUM partition ``col + j``, so ``dst`` starts at the tile's first column."""
        if dst.partition != col:
            _fail(*where, "tile position",
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
            _fail(*where, "format",
                  f"the double row takes the double-rate formats of {self.params.name} "
                  f"({', '.join(doubles) or 'none'}), not {src.dtype}")
        if not src.dims or src.dims[0][0] != 2:
            _fail(*where, "operand shape",
                  f"a double-row src is [partitions, 2, free]: its outermost free dimension "
                  f"(the pair axis) must have size 2, not shape {src.shape}")
        if ins.col:
            _fail(*where, "tile position",
                  f"the double row takes the array's whole width (no column tiling), so "
                  f"col must be 0, not {ins.col}")
        return src.free // 2

    def _check_format(self, where, fmt: str) -> None:
        if fmt not in self.params.formats:
            _fail(*where, "format", f"the tensor engine of {self.params.name} takes "
                                    f"{', '.join(self.params.formats)}, not {fmt}")

    def _placement(self, ins: LoadStationary) -> systolic.Load:
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
            placed = self._placed[key] = systolic.Load(
                k, m, fmt, row=ins.row, col=ins.col, row_size=rows * a.group_rows,
                col_size=cols * a.group_cols)
        return placed

    def _check_scale(self, where, src: AP, scale: AP | None) -> None:
        """An MX tile's scale operand: SBUF ``uint8``, one per column, with the tile's
        partitions or (32 at most) one per group of 8 (:class:`~hdl.core.isa.LoadStationary`);
        no scale with any other tile."""
        if src.dtype not in isa.MX_DTYPES:
            if scale is not None:
                _fail(*where, "format", f"only an MX tile takes a scale, not {src.dtype}")
            return
        if scale is None:
            _fail(*where, "format", f"an {src.dtype} tile needs its scale operand")
        groups = -(-src.partitions // isa.MX_GROUP_PARTITIONS)
        parts = (src.partitions,) + ((groups,) if src.partitions <= isa.MX_QUADRANT else ())
        if scale.dtype != "uint8" or scale.space != "sbuf":
            _fail(*where, "format", f"MX scales are uint8 in SBUF, not {scale.dtype} in "
                                    f"{scale.space.upper()}")
        if scale.partitions not in parts or scale.free != src.free:
            _fail(*where, "operand shape",
                  f"the scale of a {src.partitions} x {src.free} MX tile must be "
                  f"{' or '.join(f'{n} x {src.free}' for n in sorted(set(parts)))}, not "
                  f"{scale.partitions} x {scale.free}")

    # --- costs ----------------------------------------------------------------------------
    def _strided(self, ins: Instruction) -> bool:
        limit = self.params.stride_penalty
        return any(ap.dims and abs(ap.dims[-1][1]) * ap.itemsize > limit
                   for _, ap, _ in ins.operands())

    def _stream_cost(self, kind: str, ins: Instruction) -> tuple[float, float]:
        """(cycles, flops) of a vector/scalar/GpSimd instruction."""
        src = getattr(ins, "src", None) or getattr(ins, "a", None) or ins.dst
        n = src.free
        passes = 1.0
        if isinstance(ins, TensorTensor):
            passes = 1.0 if "psum" in (ins.a.space, ins.b.space) else 2.0
        cycles = stream_cycles(self.params, kind, n, passes, self._strided(ins))
        if isinstance(ins, Activation) and ins.reduce_dst is not None:
            cycles += self.params.min_interval
        # floating-point operations per element: scale-and-bias plus the function; one per
        # operation otherwise; copies, memsets and iota do none
        per_element = {Activation: 2, TensorTensor: 1, TensorReduce: 1,
                       TensorScalar: 1 if getattr(ins, "op1", None) == VectorOp.COPY else 2}
        return cycles, src.partitions * n * per_element.get(type(ins), 0)

    # --- running --------------------------------------------------------------------------
    def _plan(self, kind: str, ins: Instruction) -> tuple:
        """What the event loop needs of one instruction, costs in seconds."""
        cls = ins.__class__
        if cls is SemWait:
            return (_WAIT, ins.sem, ins.value)
        if cls is SemSignal:
            return (_SIGNAL, ins.sem, ins.count)
        if kind == "dma":
            latency, transfer = dma_seconds(self.params, ins.src.nbytes)
            return (_DMA, latency, transfer, ins.src.nbytes)
        if kind == "tensor":
            pairs = 2 if getattr(ins, "double_row", False) else 1
            if cls is LoadStationary:
                fmt, k = isa.input_format(ins.src.dtype), ins.src.partitions
                return (_LOAD, (fmt, k, ins.src.free // pairs, ins.double_row),
                        self._placement(ins), (ins.row, ins.col))
            if cls is MultiplyMoving:
                fmt, k = isa.input_format(ins.src.dtype), ins.src.partitions
                n = ins.src.free // pairs
                array_fmt = self.params.array_format(fmt)
                contraction = k * (isa.MX_QUAD if ins.src.dtype in isa.MX_DTYPES else pairs)
                return (_MULTIPLY, fmt, k, ins.dst.partitions, n,
                        systolic.Multiply(n, fmt=array_fmt, row=ins.row, col=ins.col),
                        (ins.row, ins.col), n * self.params.tensor.column_cycles(array_fmt),
                        contraction, ins.double_row)
            k, m = ins.src.partitions, ins.src.free
            return (_TRANSPOSE, systolic.Load(k, m), systolic.Transpose(k))
        cycles, work = self._stream_cost(kind, ins)
        spaces = {ap.space for _, ap, _ in ins.operands()}
        ports = tuple(i for i, (engines, memory) in enumerate(self.params.shared_ports)
                      if kind in engines and memory in spaces)
        return (_STREAM, cycles / self.params.clock(kind), work, ports)

    def run(self, program: Program, *, timing_only: bool = False, trace: bool = False,
            hbm: np.ndarray | None = None, seed: int = 0, races: bool | None = None) -> Result:
        """Run ``program``; ``hbm`` (uint8, ``program.hbm_bytes``) is read and updated in
        place in numeric mode. ``races`` (default: in numeric mode) checks that every two
        accesses of different streams to the same bytes, one of them a write, are ordered by
        semaphores."""
        self.check(program)
        if races is None:
            races = not timing_only
        races = _Races(list(program.streams), program.streams) if races else None
        p = self.params
        data = None if timing_only else _Data(self, program, hbm, seed)
        streams = list(program.streams)
        kinds = [isa.engine_kind(s) for s in streams]
        code = [program.streams[s] for s in streams]
        plans = []
        cache: dict[int, tuple] = {}
        for kind, instructions in zip(kinds, code, strict=True):
            row = []
            for ins in instructions:
                plan = cache.get(id(ins))
                if plan is None:
                    plan = cache[id(ins)] = self._plan(kind, ins)
                row.append(plan)
            plans.append(row)
        lengths = [len(c) for c in code]
        pc = [0] * len(streams)
        now = [0.0] * len(streams)
        done = [0.0] * len(streams)
        busy = [0.0] * len(streams)
        sems: dict[int, list[float]] = {}
        waiting: dict[int, list[int]] = {}
        pending: dict[int, float] = {}  # stream -> time its satisfied wait resumes
        agenda = Agenda(len(streams))
        for i in range(len(streams)):
            if code[i]:
                agenda.wake(0.0, i)
        heap = agenda.heap
        resources = Resources()  # the shared memory ports and the DMA fabric
        tensor_clock = p.clock("tensor")
        tensor_period = 1.0 / tensor_clock
        sem_latency = p.semaphore_latency
        # The array's sequencer in closed form: each tensor instruction is offered when its
        # stream reaches it, accepted when the array can take it; tiles at disjoint tile
        # positions multiply at once. The engine is busy while a load's beats or a
        # multiply's moving columns run, overlaps counted once.
        sequencer = systolic.Sequencer(p.tensor)
        load_tile, multiply = sequencer.load, sequencer.multiply
        tiles: dict[tuple[int, int], tuple] = {}  # tile position -> (fmt, k, m)
        tensor_busy_until = 0.0
        flops = 0.0
        moved = 0
        events: list[dict] = []
        pop, wake, serve, serve_all = agenda.pop, agenda.wake, resources.serve, \
            resources.serve_all
        while (woken := pop()) is not None:
            t, s, _ = woken
            while True:  # run stream s while it is the earliest
                i = pc[s]
                plan = plans[s][i]
                op = plan[0]
                if op is _WAIT:
                    sem, value = plan[1], plan[2]
                    if s in pending:
                        del pending[s]
                        waiting[sem].remove(s)
                        if races is not None:
                            races.acquire(s, sem, value)
                    else:
                        vis = sems.get(sem, ())
                        if len(vis) >= value and vis[value - 1] <= t:
                            if races is not None:
                                races.acquire(s, sem, value)
                        else:
                            waiting.setdefault(sem, []).append(s)
                            if len(vis) >= value:
                                pending[s] = vis[value - 1]
                                wake(vis[value - 1], s)
                            break
                elif op is _SIGNAL:
                    sem = plan[1]
                    visible = max(t, done[s]) + sem_latency
                    vis = sems.setdefault(sem, [])
                    if not vis or visible >= vis[-1]:
                        vis.extend([visible] * plan[2])
                    else:
                        for _ in range(plan[2]):
                            insort(vis, visible)
                    if races is not None:
                        races.release(s, sem, visible, plan[2])
                    for w in waiting.get(sem, ()):
                        want = plans[w][pc[w]][2]
                        if len(vis) >= want:
                            resume = max(now[w], vis[want - 1])
                            if w not in pending or resume < pending[w]:
                                pending[w] = resume
                                wake(resume, w)
                else:
                    ins = code[s][i]
                    if races is not None:
                        races.access(s, i, ins)
                    if op is _MULTIPLY:
                        fmt, k, m, n = plan[1], plan[2], plan[3], plan[4]
                        tile = tiles.get(plan[6])
                        if tile is None or tile[1] != k or tile[2] != m \
                                or tile[3] != plan[9] or not self._partners(tile[0], fmt):
                            self._bad_multiply(streams[s], i, ins, tile)
                        accept, last = multiply(plan[5], t * tensor_clock)
                        occupied = accept + plan[7]
                        flops += 2.0 * plan[8] * m * n
                        if data is not None:
                            data.multiply(ins)
                    elif op is _LOAD:
                        box = plan[2]
                        held = tiles.get(plan[3])
                        if len(tiles) != 1 or held is None or held[4] is not box:
                            tiles = {pos: held for pos, held in tiles.items()
                                     if not _shares_pes(box, held[4])}
                        tiles[plan[3]] = plan[1] + (box,)
                        accept, last = load_tile(box, t * tensor_clock)
                        occupied = last
                        if data is not None:
                            data.load(ins)
                    elif op is _STREAM:
                        cost = plan[1]
                        if plan[3]:  # engines sharing a memory port take turns
                            t = serve_all(plan[3], t, cost)
                        end = finish = t + cost
                        flops += plan[2]
                        if data is not None:
                            data.execute(s, ins)
                    elif op is _DMA:
                        begin = serve(_DMA, t + plan[1], plan[2])  # the core's DMA bandwidth
                        end = finish = begin + plan[2]
                        cost = end - t
                        moved += plan[3]
                        if data is not None:
                            data.dma(ins)
                    else:  # _TRANSPOSE: a load of the data and the array's transpose pass
                        accept, _ = load_tile(plan[1], t * tensor_clock)
                        second, last = multiply(plan[2], accept + 1)
                        occupied = second + plan[2].n
                        tiles = {}
                        if data is not None:
                            data.transpose(ins)
                    if op is _MULTIPLY or op is _LOAD or op is _TRANSPOSE:
                        begin = accept * tensor_period
                        stop = occupied * tensor_period
                        if stop > tensor_busy_until:
                            cost = stop - (begin if begin > tensor_busy_until
                                           else tensor_busy_until)
                            tensor_busy_until = stop
                        else:
                            cost = 0.0
                        t, end, finish = begin, begin + tensor_period, last * tensor_period
                        if trace:
                            events.append({"name": ins.MNEMONIC, "ph": "X", "ts": t * 1e6,
                                           "dur": (stop - begin) * 1e6,
                                           "stream": streams[s], "args": {"index": i}})
                    elif trace:
                        events.append({"name": ins.MNEMONIC, "ph": "X", "ts": t * 1e6,
                                       "dur": cost * 1e6, "stream": streams[s],
                                       "args": {"index": i}})
                    busy[s] += cost
                    t = end
                    if finish > done[s]:
                        done[s] = finish
                pc[s] = i + 1
                now[s] = t
                if i + 1 >= lengths[s]:
                    break
                if heap and heap[0][0] < t:  # another stream is earlier
                    wake(t, s)
                    break
        blocked = [s for s in range(len(streams)) if pc[s] < lengths[s]]
        if blocked:
            self._deadlock(streams, code, pc, blocked, sems)
        total = max(max(done, default=0.0), max(now, default=0.0))
        cycles = {name: b * p.clock(kind) if kind != "dma" else 0.0
                  for name, kind, b in zip(streams, kinds, busy, strict=True)}
        return Result(total, dict(zip(streams, busy, strict=True)), cycles,
                      dict(zip(streams, lengths, strict=True)), flops, moved, events,
                      data.sbuf if data else None, data.psum if data else None)

    def _bad_multiply(self, stream: str, index: int, ins: MultiplyMoving, stationary) -> None:
        if stationary is None:
            at = f" at tile position ({ins.row}, {ins.col})" if ins.row or ins.col else ""
            _fail(stream, index, ins, "stationary", f"no stationary tile is loaded{at}")
        fmt, k, m, double_row = stationary[:4]
        if double_row != ins.double_row:
            _fail(stream, index, ins, "stationary",
                  f"the loaded stationary is {'' if double_row else 'not '}a double row, the "
                  f"multiply is {'' if ins.double_row else 'not '}one (double_row="
                  f"{int(ins.double_row)})")
        why = self._mismatch(fmt, isa.input_format(ins.src.dtype))
        if k != ins.src.partitions or why:
            _fail(stream, index, ins, "stationary",
                  f"the loaded stationary is {k} x {m} {fmt}, the moving tile has "
                  f"{ins.src.partitions} partitions of {ins.src.dtype}"
                  + (f" ({why})" if why else ""))
        _fail(stream, index, ins, "operand shape",
              f"dst has {ins.dst.partitions} partitions, the stationary {m} columns")

    def _partners(self, tile: str, fmt: str) -> bool:
        """Whether a multiply in ``fmt`` may read a stationary tile in ``tile``."""
        return tile == fmt or self._mismatch(tile, fmt) is None

    def _mismatch(self, tile: str, fmt: str) -> str | None:
        """Why a multiply in ``fmt`` may not read a stationary tile in ``tile`` (None: it
        may): the array's rule, :func:`sim.golden.systolic.check_formats` (one rate and
        kind; fp32 and tf32 with no other format; mxfp8 with mxfp4 is allowed [NKI4])."""
        if (tile, fmt) not in self._mixes:
            p, why = self.params, None
            try:
                systolic.check_formats(p.tensor, p.array_format(tile), p.array_format(fmt))
            except ValueError as err:
                why = str(err)
            self._mixes[(tile, fmt)] = why
        return self._mixes[(tile, fmt)]

    def _deadlock(self, streams, code, pc, blocked, sems) -> None:
        edges = []
        for s in blocked:
            ins = code[s][pc[s]]
            signallers = sorted({streams[o] for o in range(len(streams))
                                 for later in code[o][pc[o]:]
                                 if isinstance(later, SemSignal) and later.sem == ins.sem})
            by = ("signalled later by " + ", ".join(signallers) if signallers
                  else "nothing left signals it")
            edges.append(f"{streams[s]}[{pc[s]}] waits for S[{ins.sem}] to reach {ins.value} "
                         f"(at {len(sems.get(ins.sem, ()))}; {by})")
        s = blocked[0]
        _fail(streams[s], pc[s], code[s][pc[s]], "deadlock",
              "every unfinished stream waits: " + "; ".join(edges))


def _shares_pes(a: systolic.Load, b: systolic.Load) -> bool:
    """Whether two placed tiles share PEs."""
    return (a.row < b.row + b.row_size and b.row < a.row + a.row_size
            and a.col < b.col + b.col_size and b.col < a.col + a.col_size)


def _footprint(ap: AP) -> tuple:
    """Bytes ``ap`` may touch: on chip (space, first partition, end partition, first byte,
    end byte); in HBM ("hbm", address of row 0, row stride, rows, first byte, end byte of a
    row)."""
    lo, hi = _extent(ap.dims)
    lo, hi = lo * ap.itemsize, (hi + 1) * ap.itemsize
    if ap.space == "hbm":
        return ("hbm", ap.offset, ap.pstride, ap.partitions, lo, hi)
    return (ap.space, ap.partition, ap.partition + ap.partitions, ap.offset + lo,
            ap.offset + hi)


def _overlap(a: tuple, b: tuple) -> bool:
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


class _Races:
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
        new = [(_footprint(ap), written) for _, ap, written in ins.operands()]
        for fp, write, t, epoch, other in self.accesses:
            if t == s or mine[t] > epoch:
                continue  # same stream, or ordered by semaphores
            for nfp, nwrite in new:
                if (write or nwrite) and _overlap(fp, nfp):
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
        _fail(self.names[s], index, ins, "race",
              f"it {what} {nfp[0].upper()} bytes that {self.names[t]}[{other}] "
              f"`{isa.format_instruction(theirs)}` also accesses, one of them writing, and "
              f"no semaphore orders the two")


class _Data:
    """The memories and the numeric effect of each instruction."""

    def __init__(self, core: Core, program: Program, hbm, seed: int):
        p = core.params
        self.core = core
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

    def read32(self, ap: AP) -> np.ndarray:
        """fp32 bit patterns, (partitions, free), of an operand of any float type."""
        bits = self.codes(ap)
        if ap.dtype in ("fp32", "int32", "uint32"):
            return bits.astype(np.uint32)
        return np.asarray(numerics.widen(bits, format_by_name(ap.dtype)), dtype=np.uint32)

    def write32(self, ap: AP, bits32: np.ndarray, rounding: str = "rne", seed: int = 0) -> None:
        """Store fp32 bit patterns (partitions, free) into ``ap``, cast to its type."""
        bits32 = np.asarray(bits32, dtype=np.uint32).reshape(ap.partitions, -1)
        if ap.dtype in ("fp32", "int32", "uint32"):
            self.write(ap, bits32)
            return
        fmt = format_by_name(ap.dtype)
        # lanes are partitions: the stochastic cast draws per lane, beat by beat
        out = numerics.cast_bits(bits32.T.view(np.float32), fmt, rounding, seed ^ self.seed,
                                 self.params.rng)
        if ap.dtype == "tf32":
            out = out.astype(np.uint32) << isa.TF32_SHIFT
        self.write(ap, out.T)

    def scalar(self, ap: AP | None, imm: float, partitions: int) -> np.ndarray:
        if ap is None:
            return np.full(partitions, np.float32(imm).view(np.uint32), dtype=np.uint32)
        return self.read32(ap).reshape(partitions)

    # instructions ----------------------------------------------------------------------------
    def load(self, ins: LoadStationary) -> None:
        """The tile replaces every tile it overlaps on the array."""
        placed = self.core._placement(ins)
        fmt = self.params.array_format(isa.input_format(ins.src.dtype))
        if ins.src.dtype in isa.MX_DTYPES:
            tile = self.mx_tile(ins.src, ins.scale) + (fmt, placed)
        else:
            tile = (self.tensor_codes(ins), None, fmt, placed)
        self.tiles = {pos: t for pos, t in self.tiles.items() if not _shares_pes(placed, t[3])}
        self.tiles[(ins.row, ins.col)] = tile

    def multiply(self, ins: MultiplyMoving) -> None:
        psum = self.read(ins.dst).reshape(ins.dst.partitions, -1) if ins.accumulate else None
        tile, tile_scales, fmt, _ = self.tiles[(ins.row, ins.col)]
        mfmt = self.params.array_format(isa.input_format(ins.src.dtype))
        if ins.src.dtype in isa.MX_DTYPES:
            moving, scales = self.mx_tile(ins.src, ins.scale)
            out = systolic.matmul_mx(tile, moving, fmt, tile_scales, scales, psum,
                                     ins.accumulate, moving_fmt=mfmt)
        else:
            out = systolic.matmul(tile, self.tensor_codes(ins), fmt, psum, ins.accumulate,
                                  moving_fmt=mfmt)
        self.write(ins.dst, out)

    def transpose(self, ins: Transpose) -> None:
        """The array's transpose pass: the codes as they were, in the input's format."""
        out = systolic.transpose(self.codes(ins.src), self.params.array_format(ins.src.dtype))
        self.write(ins.dst, out << isa.TF32_SHIFT if ins.src.dtype == "tf32" else out)
        self.tiles = {}

    def dma(self, ins: DmaCopy) -> None:
        self.write(ins.dst, self.read(ins.src))

    def _activation_params(self, lanes: int):
        params = self._act.get(lanes)
        if params is None:
            params = self._act[lanes] = ActivationParams(lanes=lanes,
                                                         functions=self.params.functions)
        return params

    def execute(self, stream: int, ins: Instruction) -> None:
        cls = ins.__class__
        if cls is Activation:
            x = self.read32(ins.src)
            lanes, n = x.shape
            bias = self.scalar(ins.bias, 0.0, lanes)
            scale = np.full(lanes, np.float32(ins.scale).view(np.uint32), dtype=np.uint32)
            last = np.zeros(n, dtype=bool)
            last[-1] = True
            out, sums = activation.run(self._activation_params(lanes), ins.func, x.T, scale,
                                       bias, last)
            self.write32(ins.dst, out.T, ins.rounding, ins.seed)
            if ins.reduce_dst is not None:
                self.write32(ins.reduce_dst, sums[-1].reshape(lanes, 1))
        elif cls is TensorTensor:
            r = vector.elementwise(ins.op, self.read32(ins.a), self.read32(ins.b))
            self.write32(ins.dst, r, ins.rounding, ins.seed)
        elif cls is TensorScalar:
            x = self.read32(ins.src)
            lanes = x.shape[0]
            r = vector.elementwise(ins.op0, x,
                                   self.scalar(ins.operand0, ins.imm0, lanes)[:, None])
            if ins.op1 != VectorOp.COPY:
                r = vector.elementwise(ins.op1, r,
                                       self.scalar(ins.operand1, ins.imm1, lanes)[:, None])
            self.write32(ins.dst, r, ins.rounding, ins.seed)
        elif cls is TensorReduce:
            x = self.read32(ins.src)
            lanes, n = x.shape
            last = np.zeros(n, dtype=bool)
            last[-1] = True
            r = vector.run(VectorParams(lanes=lanes), ins.op, x.T, last=last,
                           reduce=ins.reduce)
            self.write32(ins.dst, r.T)
        elif cls is TensorCopy:
            self.write32(ins.dst, vector.elementwise(VectorOp.COPY, self.read32(ins.src), 0),
                         ins.rounding, ins.seed)
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
