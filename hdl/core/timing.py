"""The stream rule: the cycles of a vector, scalar or GpSimd instruction, stated once for the
core simulator (:func:`instruction_cycles`, :func:`stream_cycles`) and the core RTL
(:class:`StreamRule`, whose cycles the sequencer holds an instruction's retirement to).

An instruction streaming ``N`` elements per partition takes, in its engine's cycles,

    ``access_start + max(least, ceil(turns * passes * N * k * c / e))``

* ``N``: the elements per partition of the instruction's source (``src``, else ``data``,
  else ``a``, else ``dst``; ``dst`` for the gathers, ``SequenceBounds`` and
  ``NonzeroWithCount``, which write more than they read);
* ``passes``: the element streams it reads: 2 for ``TensorTensor`` (1 where an input is in
  PSUM, read through the engine's PSUM port beside the SBUF one) and ``TensorTensorScan``,
  2 for ``NonzeroWithCount`` (its source searched, its destination filled), 1 otherwise;
* ``k``: 2 where an operand's minor stride exceeds ``stride_penalty`` bytes, else 1;
* ``turns``: on the scalar engine, ``ceil(P / activation_lanes)`` for the ``P`` partitions
  of that operand (its lanes take the partitions a group at a time; at full scale a lane per
  partition, one turn); 1 on the others;
* ``c``: the cycles an element of an operation the lanes do not compute in one takes
  (the spec's ``op_cycles``: the vector engine's reciprocal, GpSimd's rsqrt), else 1; the
  core RTL refuses those operations (:data:`hdl.vector.ops.ENGINE_ONLY_OPS`), so
  :class:`StreamRule` has no ``c``;
* ``e``: elements per lane per cycle, the spec's ``vector_elements`` on the vector engine,
  1 on the others;
* ``least``: ``dynamic_interval`` for a copy from an offset read at run time, else
  ``min_interval``;
* an ``Activation`` that also reduces (``reduce_dst``) takes ``min_interval`` more.

An engine retires on a cycle of its clock, so the stream is rounded up to a whole cycle.
The constants are spec fields with their sources [NKI2, ISA-COST].
"""

from __future__ import annotations

import math
from fractions import Fraction

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.core import isa
from hdl.core.access import AP_LAYOUT, SPACE
from hdl.core.isa import (
    DTYPES,
    OPCODE_BITS,
    WORD_BITS,
    Activation,
    GatherFlattened,
    Instruction,
    LocalGather,
    NonzeroWithCount,
    SemSignal,
    SemWait,
    SequenceBounds,
    TensorCopyDynamic,
    TensorTensor,
    TensorTensorScan,
    field_positions,
)
from hdl.core.params import CoreParams
from hdl.core.sequencer import CYCLE_BITS
from hdl.vector.ops import ENGINE_ONLY_OPS

__all__ = ["StreamRule", "elements_field", "instruction_cycles", "stream_cycles"]


def elements_field(cls: type[Instruction]) -> str:
    """The access-pattern field of ``cls`` whose elements per partition are the rule's ``N``."""
    if cls in (GatherFlattened, SequenceBounds, LocalGather, NonzeroWithCount):
        return "dst"
    names = [name for name, kind, _ in cls.FIELDS if kind == "ap"]
    return next((name for name in ("src", "data", "a") if name in names), "dst")


def _per_cycle(params: CoreParams, engine: str) -> Fraction:
    """Elements a lane of ``engine`` streams per cycle, as an exact fraction."""
    return Fraction(repr(params.vector_elements)) if engine == "vector" else Fraction(1)


def stream_cycles(params: CoreParams, engine: str, elements: float, passes: int = 1,
                  strided: bool = False, dynamic: bool = False, turns: int = 1,
                  per_element: float = 1) -> int:
    """Cycles of a vector, scalar or GpSimd instruction of ``passes`` streams of ``elements``
    per partition, ``turns`` times over, ``per_element`` cycles an element (see the module
    docstring); ``dynamic``: a copy from an offset read at run time."""
    e = _per_cycle(params, engine)
    work = turns * passes * elements * (2 if strided else 1) * per_element
    if work == int(work):
        stream = -(-int(work) * e.denominator // e.numerator)
    else:
        stream = math.ceil(Fraction(work) / e)
    least = params.dynamic_interval if dynamic and params.dynamic_interval else \
        params.min_interval
    return params.access_start + max(least, stream)


def instruction_cycles(params: CoreParams, engine: str, ins: Instruction) -> int:
    """Cycles of the instruction ``ins`` on an idle ``engine`` (vector, scalar or GpSimd)."""
    ap = getattr(ins, elements_field(type(ins)))
    turns = -(-ap.partitions // params.activation_lanes) if engine == "scalar" else 1
    passes = 1
    if isinstance(ins, TensorTensor):
        passes = 1 if "psum" in (ins.a.space, ins.b.space) else 2
    elif isinstance(ins, TensorTensorScan | NonzeroWithCount):
        passes = 2
    limit = params.stride_penalty
    strided = any(op.dims and abs(op.dims[-1][1]) * op.itemsize > limit
                  for _, op, _ in ins.operands())
    costs = dict(params.op_cycles)
    ops = (getattr(ins, name, None) for name in ("op", "op0", "op1"))
    per_element = max((costs.get(op.name.lower(), 1) for op in ops if op in ENGINE_ONLY_OPS),
                      default=1)
    cycles = stream_cycles(params, engine, ap.free, passes, strided,
                           isinstance(ins, TensorCopyDynamic), turns, per_element)
    if isinstance(ins, Activation) and ins.reduce_dst is not None:
        cycles += params.min_interval
    return cycles


class StreamRule(wiring.Component):
    """The stream rule's cycles (:func:`instruction_cycles`) of the instruction ``word`` on
    an engine of ``engine`` (vector, scalar or GpSimd), combinational; for a word that is not
    one of the engine's instructions, any value."""

    def __init__(self, params: CoreParams, engine: str):
        e = _per_cycle(params, engine)
        if e.numerator & (e.numerator - 1):
            raise ValueError(f"{params.name}: the core RTL streams a power of two elements "
                             f"per {e.denominator} cycles, not {e.numerator}")
        self.params, self.engine, self.per_cycle = params, engine, e
        self.classes = tuple(c for c in isa.ENGINE_OPS[engine]
                             if c not in (SemSignal, SemWait))
        super().__init__({"word": In(WORD_BITS), "cycles": Out(CYCLE_BITS)})

    def elaborate(self, platform):
        m = Module()
        p, word = self.params, self.word
        opcode = word[:OPCODE_BITS]

        def ap_at(pos):
            return data.View(AP_LAYOUT, word[pos:pos + AP_LAYOUT.size])

        def position(cls, name):
            return field_positions(cls)[name][0]

        # each operand position's minor stride against the penalty, once per position
        limit = p.stride_penalty
        strided_at = {}
        for cls in self.classes:
            for name, kind, _ in cls.FIELDS:
                pos = position(cls, name)
                if kind != "ap" or pos in strided_at:
                    continue
                ap = ap_at(pos)
                minor = Mux(ap.n2 != 0, ap.s2, Mux(ap.n1 != 0, ap.s1, Mux(ap.n0 != 0, ap.s0, 0)))
                magnitude = Mux(minor < 0, -minor, minor)
                over = 0
                for code, size in DTYPES.values():
                    over = Mux(ap.dtype == code, magnitude * size > limit, over)
                flag = Signal(name=f"strided_{pos}")
                m.d.comb += flag.eq((ap.partitions != 0) & over)
                strided_at[pos] = flag

        sizes = [Signal(16, name=f"n{i}") for i in range(3)]
        rows = Signal(AP_LAYOUT.members["partitions"], name="rows")
        passes2, strided, dynamic, reduces = Signal(), Signal(), Signal(), Signal()
        with m.Switch(opcode):
            for cls in self.classes:
                with m.Case(cls.OPCODE):
                    ap = ap_at(position(cls, elements_field(cls)))
                    m.d.comb += [size.eq(getattr(ap, f"n{i}")) for i, size in enumerate(sizes)]
                    m.d.comb += rows.eq(ap.partitions)
                    positions = [position(cls, name) for name, kind, _ in cls.FIELDS
                                 if kind == "ap"]
                    m.d.comb += strided.eq(Cat(*(strided_at[pos] for pos in positions)).any())
                    if cls is TensorTensor:
                        a, b = (ap_at(position(cls, name)) for name in ("a", "b"))
                        m.d.comb += passes2.eq((a.space != SPACE["psum"])
                                               & (b.space != SPACE["psum"]))
                    elif cls in (TensorTensorScan, NonzeroWithCount):
                        m.d.comb += passes2.eq(1)
                    if cls is TensorCopyDynamic and p.dynamic_interval:
                        m.d.comb += dynamic.eq(1)
                    if cls is Activation:
                        m.d.comb += reduces.eq(
                            ap_at(position(cls, "reduce_dst")).partitions != 0)
        elements = Signal(48)
        m.d.comb += elements.eq(
            Mux(sizes[0] == 0, 1, sizes[0]) * Mux(sizes[1] == 0, 1, sizes[1])
            * Mux(sizes[2] == 0, 1, sizes[2]))
        turns = 1
        if self.engine == "scalar":
            lanes = p.activation_lanes
            turns = Signal(range(256), name="turns")
            m.d.comb += turns.eq((rows + (lanes - 1)) // lanes)
        work = Signal(60)
        m.d.comb += work.eq(((elements * turns) << passes2) << strided)
        # ceil(work * denominator / numerator), the numerator a power of two
        e = self.per_cycle
        shift = e.numerator.bit_length() - 1
        scaled = work * e.denominator
        stream = Signal(64)
        m.d.comb += stream.eq((scaled + (e.numerator - 1)) >> shift)
        least = Mux(dynamic, p.dynamic_interval or p.min_interval, p.min_interval)
        m.d.comb += self.cycles.eq(p.access_start + Mux(stream > least, stream, least)
                                   + Mux(reduces, p.min_interval, 0))
        return m
