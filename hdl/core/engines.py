# amaranth: UnusedElaboratable=no
# (Amaranth's documented lint option: the elaboratables made here for their signatures are
# emitted apart, as modules of their own, and never elaborated where they are made.)
"""The core's vector and GpSimd engines: the vector unit (:class:`hdl.vector.vector.Vector`,
one lane per partition) fed from and writing to SBUF and PSUM through the access patterns of
``TensorTensor``, ``TensorScalar``, ``TensorReduce``, ``TensorCopy`` and ``Memset``, on the
vector engine ``TensorTensorScan``, and on the GpSimd engine ``Iota``.

Per instruction: decode (the fields of the opcode's ``FIELDS`` table), then for
``TensorScalar``'s per-partition scalar operands one read of them (``operand0`` through port
``b``, ``operand1`` through port ``a``, in the same cycle), then the stream: every cycle the
next element of ``a`` (and ``b``) is read from all partitions at once, one cycle later it
enters the unit (lane ``l`` takes partition ``first + l``), and every result beat is written
to ``dst`` at the destination pattern's next element, in the partitions of the tile only. ``Memset``
writes its value without the unit. Two read ports (``a``, ``b``) and one write port.
``Iota`` streams like a copy of ``dst`` into itself, with lane ``l``'s element ``i`` replaced
by ``base + l * pstep + i * step`` (exact in 50 bits: ``p < 2**7``, ``i < 2**16``) converted to
fp32 (round to nearest even, as numpy converts the integer), which the unit then casts.

Results go to ``dst``'s type through the unit's own output cast (its ``out_format``, round to
nearest even or, where the instruction says so, stochastically by the lanes' generators,
seeded with :data:`GENERATOR_SEED` and advancing once per output beat, as
:func:`sim.core.data.unit_beats` states it; fp32 written as it comes, as the simulator
writes it); ``Memset``'s value,
the same in every partition, through one cast lane
(:class:`~hdl.numerics.cast.FormatCastLane`). Each is written at the element's byte offset
in its word.

``TensorScalar`` runs ``op1(op0(src, s0), s1)`` in one pass through the unit (its lanes'
second operation, ``op1`` COPY: none), ``s0`` and ``s1`` each an immediate (``imm0``,
``imm1``) or a per-partition scalar operand (``operand0``, ``operand1``) of any type of
:data:`OPERAND_DTYPES`, loaded the same way (:func:`load_operand`): widened to fp32 as the
core simulator reads it (:func:`widen_operand`), the operand's element taken at its byte in
its word.

``TensorCopyDynamic`` is a ``TensorCopy`` whose source moves before it streams: the
offset's word (one int32 or uint32 in SBUF, its partition picked from the row) is read
through port ``b`` and the source starts ``v * stride`` elements on.

The vector engine's ``StreamShuffle`` bypasses the unit: each element of the source read
from every partition is written, a cycle later, to the destination's partitions, lane ``l``
(the destination's partition ``l`` from its first) taking lane ``32 q + e`` of the source
for ``l = 32 q + i`` and ``e`` the shuffle's entry ``i``, its bits as they are; an entry of
:data:`~hdl.core.isa.SHUFFLE_KEEP` leaves its partition unwritten.

The vector engine's ``RangeSelect`` streams its source through the unit as a copy, its
bounds loaded as ``TensorScalar``'s operands are; each element written is the fill (cast as
a memset's value) unless both comparisons of its place (``start`` plus its index among the
elements written, in fp32) with its lane's bounds hold (:func:`~hdl.vector.fpcmp.holds`).
GpSimd's ``AffineSelect`` alike: each element written is the fill unless the comparison
with 0 of its Iota value (the lane's base plus its index times ``step``, as ``Iota``
counts it, the fields where ``Iota`` has them) holds (:func:`with_zero`).

GpSimd's ``NonzeroWithCount`` searches one core's first partition at a time (the SBUF is one
memory, one address a cycle, and each core writes at its own count): the source's positions
read in turn, each nonzero one written as ``offset + position`` at dst's next element (an
Iota value: the lanes' base the offset, the position its index), then the padding up to
dst's last element, which takes the count. At simulation scale one core; at full scale the
eight in turn, longer than the stream rule charges (two passes, the cores at once as the
hardware runs them).

The vector engine's ``Max8`` streams its source through the unit as a copy into fp32,
each lane inserting its values into a list of its 8 largest (:func:`top8`), then streams
each lane's list through the unit as a copy into ``dst``; the unit's beats are the
source's elements and then the 8 (:func:`sim.core.data.unit_beats`).

The vector engine's ``FindIndex8`` and ``MatchReplace8`` read their 8 values a lane
element by element (through port ``b``, widened as a scalar operand is), stream the data
through the unit as a copy into fp32, each lane noting where each value first occurs
(:func:`match8`; for ``MatchReplace8`` an element matched goes on as ``imm`` to the values
after), then ``MatchReplace8`` copies the data into ``dst`` through the unit with ``imm``
(cast as a memset's value) at the places matched, and the indices are written as they are
(``FindIndex8``'s ``dst``, ``MatchReplace8``'s ``dst_idx``).

The vector engine's ``Random`` streams like a copy of ``dst`` into itself, each element
written the number in [0, 1) its lane draws from its generator's word of the beat
(:class:`~hdl.vector.ops.Draw`); its ``Dropout`` streams its source through the unit as a
copy, its drop probability loaded as ``TensorScalar``'s ``operand0`` (or ``imm``) is, each
element written +0.0 where its lane's number of the beat is below the probability. Both
then go to ``dst``'s type as every result does, and advance the generators a beat an
element.

GpSimd's ``SequenceBounds`` bypasses the unit: two passes over its one partition's ids,
an element a cycle pair (read, then write), the first writing each element's start, the
second each run's ends once the run ends (:meth:`VectorEngine._sequence_bounds`), each bound
written as a memset's value.

``TensorTensorScan`` streams ``a`` and ``b`` as ``TensorTensor`` does, its running value's
initial value the per-partition ``initial`` (read as ``operand0`` is) or the immediate
``imm``; the unit's lanes carry the running value from element to element in fp32 (the
scan of :class:`~hdl.vector.vector.Vector`), one element per cycle.

Element types: ``a``, ``b``, ``src`` and ``dst`` each of :data:`ENGINE_DTYPES` (``a`` and
``b`` each its own), as the core simulator reads and writes them: the float types of the
unit's formats (:data:`~hdl.vector.convert.ENGINE_FORMATS`; tf32's code at the word's top,
moved to the lane word's low bits and back by the partition's slice), the integer types
by value: int8, uint8, int32 and uint32 to the nearest fp32 on the way in and on the
way out the nearest integer, ties to even, saturated, NaN 0 (:func:`nearest_integer`,
:func:`saturated`), except that a bitwise operation (:func:`~hdl.core.isa.integer_words`)
takes and writes int32 and uint32 words as they are; an Iota into int32 or uint32 writes
its integer itself. Scalar operands (and a scan's ``initial``) are of
:data:`OPERAND_DTYPES`. What this datapath runs otherwise: :func:`supported`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.core.access import AP_LAYOUT, SPACE, ApWalker, dtype_shift
from hdl.core.isa import (
    AP,
    DTYPES,
    GPSIMD_CORE_PARTITIONS,
    SHUFFLE_KEEP,
    SHUFFLE_LANES,
    TF32_SHIFT,
    WORD_BITS,
    AffineSelect,
    Dropout,
    FindIndex8,
    Instruction,
    Iota,
    MatchReplace8,
    Max8,
    Memset,
    NonzeroWithCount,
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
    field_positions,
)
from hdl.emitted import module_text
from hdl.numerics.cast import FormatCastLane
from hdl.numerics.formats import FP32, format_by_name
from hdl.numerics.fpu import Widen, WidenParams, lzc, round_pack
from hdl.vector.convert import ENGINE_FORMATS
from hdl.vector.fpcmp import f_eq, f_lt, holds, is_nan
from hdl.vector.lanes import add_lane
from hdl.vector.ops import BITWISE_OPS, ENGINE_ONLY_OPS, Draw, Reduce, VectorOp
from hdl.vector.vector import Vector, VectorParams

__all__ = ["ENGINE_DTYPES", "ENGINE_RUNS", "GENERATOR_SEED", "INDEX_BITS", "IOTA_MODULE",
           "MOVED_BITS", "OPERAND_DTYPES", "SLICE_MODULES", "VECTOR_OPS", "EngineSlice",
           "IotaLane", "VectorEngine", "bitwise", "by_partition", "int_word_to_fp32",
           "lane_input", "lane_output", "load_operand", "match8", "moved_bytes", "moved_source",
           "nearest_integer", "operand_refusal", "pick", "saturated", "supported", "top8",
           "unit_format", "widen_operand"]

VECTOR_OPS = (TensorTensor, TensorScalar, TensorReduce, TensorCopy, Memset)
#: What each engine built of this module runs, by the kind of its stream.
ENGINE_RUNS = {"vector": VECTOR_OPS + (TensorCopyDynamic, TensorTensorScan, Transpose,
                          StreamShuffle, RangeSelect, Max8, FindIndex8, MatchReplace8,
                          Random, Dropout),
               "gpsimd": (Iota,) + VECTOR_OPS[:2] + VECTOR_OPS[3:] + (TensorCopyDynamic,
                                                                   SequenceBounds,
                                                                   AffineSelect,
                                                                   NonzeroWithCount)}
DATA_BITS = 32
#: Bits of an Iota value: ``base + p * pstep + i * step`` with 32-bit signed fields,
#: ``p`` < 128 partitions and ``i`` < 2**16 free elements.
IOTA_BITS = 50
#: The module of one partition's Iota conversion, emitted once and instantiated per partition.
IOTA_MODULE = "neuron_core_iota_lane"
#: The module of one partition's share of each engine (:class:`EngineSlice`), by kind.
SLICE_MODULES = {"vector": "neuron_core_vector_slice", "gpsimd": "neuron_core_gpsimd_slice"}
#: The types of a per-partition scalar operand that fill its word: fp32 as it is, int32 and
#: uint32 by value (as they are for a bitwise operation).
WORD_OPERANDS = ("fp32", "int32", "uint32")
#: The types of a per-partition scalar operand widened exactly to fp32 (:func:`widen_operand`).
WIDENED_OPERANDS = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fn", "int8", "tf32")
#: Every type of a per-partition scalar operand the engines read: each type the core
#: simulator computes on (not the MX quads, which it refuses); uint8 by value.
OPERAND_DTYPES = WORD_OPERANDS + WIDENED_OPERANDS + ("uint8",)
#: The element types of the engines' streamed inputs and destinations: the units' formats
#: (:data:`~hdl.vector.convert.ENGINE_FORMATS`), int8, uint8, int32 and uint32 (by value, as
#: the core simulator takes them).
ENGINE_DTYPES = ENGINE_FORMATS + ("int8", "uint8", "int32", "uint32")
#: The seed of every lane generator of the core's units (the simulator's run seed that
#: matches the RTL's, :func:`sim.core.data.unit_beats`).
GENERATOR_SEED = 0


def supported(ins: Instruction, formats: tuple[str, ...] = ENGINE_DTYPES,
              kind: str = "vector") -> str | None:
    """Why the core's engine of ``kind`` (vector or gpsimd), reading and writing the element
    types ``formats``, cannot run ``ins`` (None: it can)."""
    runs = ENGINE_RUNS[kind]
    if not isinstance(ins, runs):
        return f"the {kind} engine runs {', '.join(c.__name__ for c in runs)}"
    for name in ("op", "op0", "op1"):
        if getattr(ins, name, None) in ENGINE_ONLY_OPS:
            return f"the {kind} engine's lanes compute no {getattr(ins, name).name.lower()}"
    return operand_refusal(ins, formats)


def operand_refusal(ins: Instruction, formats: tuple[str, ...] = ENGINE_DTYPES) -> str | None:
    """Why the vector unit cannot run the element-wise instruction ``ins`` on operands of
    its types (None: it can)."""
    aps: dict[str, AP] = {name: ap for name, ap, _ in ins.operands()}
    if aps["dst"].dtype not in formats:
        return f"destinations are {', '.join(formats)}, not {aps['dst'].dtype}"
    for ap in (aps[n] for n in ("a", "b", "src") if n in aps):
        if ap.dtype not in formats:
            return f"inputs are {', '.join(formats)}, not {ap.dtype}"
    for name in ("operand0", "operand1", "initial", "prob"):
        if name in aps and aps[name].dtype not in OPERAND_DTYPES:
            return f"{name} must be one of {', '.join(OPERAND_DTYPES)}, not {aps[name].dtype}"
    return None


def engine_ports(reads: tuple[str, ...], partitions: int, words: int) -> dict:
    """An engine's members as the core wires them: issue/word/done from its sequencer, a
    read port per name in ``reads`` (``<name>_addr/_en/_psum`` out, ``<name>_data`` in, one
    word per partition) and the write port ``w_*`` (address, PSUM select, partition mask,
    byte enables, one word per partition) into SBUF or PSUM."""
    members = {"issue": In(1), "word": In(WORD_BITS), "done": Out(1)}
    for port in reads:
        members.update({f"{port}_addr": Out(range(words)), f"{port}_en": Out(1),
                        f"{port}_psum": Out(1),
                        f"{port}_data": In(data.ArrayLayout(DATA_BITS, partitions))})
    members.update({"w_addr": Out(range(words)), "w_psum": Out(1), "w_part": Out(partitions),
                    "w_be": Out(DATA_BITS // 8),
                    "w_data": Out(data.ArrayLayout(DATA_BITS, partitions))})
    return members


def read_step(m, adv, enable, ws: ApWalker, sent, s1_valid, s1_last, shift) -> None:
    """An engine's read stage for one source walked by ``ws``: when ``adv`` (the stage may
    move), read (``enable``) and, until the last element was ``sent``, step the walker and
    stage the element's row end and byte ``shift`` for the next cycle (``s1_valid``)."""
    m.d.comb += enable.eq(adv)
    with m.If(adv):
        m.d.sync += s1_valid.eq(~sent)
        with m.If(~sent):
            m.d.comb += ws.step.eq(1)
            m.d.sync += [s1_last.eq(ws.row_last), shift.eq(ws.byte[:2]),
                         sent.eq(ws.row_last)]


def moved_source(src, delta):
    """``TensorCopyDynamic``'s source: ``src`` with its offset moved by ``delta`` bytes
    (:func:`moved_bytes`; combinational)."""
    moved = Signal(AP_LAYOUT, name="moved_src")
    return moved, [moved.eq(src), moved.offset.eq(src.offset + delta)]


def moved_bytes(v, word, dtype):
    """The bytes ``TensorCopyDynamic`` (its fields in ``word``) moves its source of element
    type ``dtype`` by: ``v`` (the offset's value) times its stride, in elements."""
    pos, bits, _ = field_positions(TensorCopyDynamic)["stride"]
    return (v * word[pos:pos + bits].as_signed()) << dtype_shift(dtype)


#: Bits of the byte move of a ``TensorCopyDynamic`` source, signed (:func:`moved_bytes`).
MOVED_BITS = AP_LAYOUT.members["offset"].width + 1


def top8(m: Module, v, clear, insert) -> Array:
    """The 8 largest fp32 values ``v`` inserted (``insert``) since ``clear``, largest first,
    as registers: a value goes before the first that is smaller (as fp32 values: after equal
    ones, as a stable sort puts them), a NaN after every other; Max8's list."""
    top = [Signal(32, name=f"top{k}") for k in range(8)]
    held = [Signal(name=f"held{k}") for k in range(8)]
    before = [~held[k] | (~is_nan(v) & (is_nan(top[k]) | f_lt(top[k], v))) for k in range(8)]
    with m.If(clear):
        m.d.sync += [h.eq(0) for h in held]
    with m.Elif(insert):
        for k in range(8):
            with m.If(before[k]):  # v here, or the entry before it moved down
                m.d.sync += [held[k].eq(Mux(before[k - 1], held[k - 1], 1) if k else 1),
                             top[k].eq(Mux(before[k - 1], top[k - 1], v) if k else v)]
    return Array(top)


#: Bits of an element's index in a search of FindIndex8 and MatchReplace8 (its source's
#: elements a partition, at most 16,384).
INDEX_BITS = 16


def match8(m: Module, v, lane) -> tuple:
    """FindIndex8's and MatchReplace8's state of one lane (``lane``, an
    :class:`EngineSlice`): its 8 values, each loaded from the lane's ``scalar`` register
    (``set_val``, value ``emit_k``), and where each first occurs among the fp32 values ``v``
    searched (``match``, ``v`` the element at index ``at``), an element matched by value
    ``j`` going on as ``imm`` to the values after ``j`` (``chain``: MatchReplace8's
    replacements, in turn). ``(found_at, replaced)``: value ``emit_k``'s index (else
    2**32 - 1 with ``miss_ones``, else 0), and whether the element at ``at`` was matched."""
    vals = Array(Signal(32, name=f"val{j}") for j in range(8))
    found = Array(Signal(name=f"found{j}") for j in range(8))
    where = Array(Signal(INDEX_BITS, name=f"where{j}") for j in range(8))
    # the element as value j sees it: v, or imm once an earlier value matched it (chain)
    cur = v
    hits = []
    for j in range(8):
        hit, seen = Signal(name=f"hit{j}"), Signal(32, name=f"seen{j}")
        m.d.comb += [seen.eq(cur), hit.eq(~found[j] & f_eq(seen, vals[j]))]
        hits.append(hit)
        cur = Mux(lane.chain & hit, lane.imm, seen)
    with m.If(lane.set_val):
        m.d.sync += vals[lane.emit_k].eq(lane.scalar)
    with m.If(lane.clear):
        m.d.sync += [found[j].eq(0) for j in range(8)]
    with m.Elif(lane.match):
        for j in range(8):
            with m.If(hits[j]):
                m.d.sync += [found[j].eq(1), where[j].eq(lane.at)]
    miss = Mux(lane.miss_ones, 0xFFFFFFFF, 0)
    replaced = Cat(*[found[j] & (where[j] == lane.at) for j in range(8)]).any()
    return Mux(found[lane.emit_k], where[lane.emit_k], miss), replaced


def by_partition(lanes: list, first, ways: list[int]):
    """The bits of ``lanes`` (one a lane) by partition: partition ``P``'s is lane ``(P -
    first) % n``'s, ``first`` one of ``ways`` (a tile's first partition; combinational)."""
    n = len(lanes)
    out = []
    for part in range(n):
        bit = lanes[part]
        for k in ways[1:]:
            bit = Mux(first == k, lanes[(part - k) % n], bit)
        out.append(bit)
    return Cat(*out)


def pick(rows, first, chunk: int):
    """The word of ``rows`` (candidate 32-bit words, ``k`` at bits ``32 k``) for ``first``,
    a multiple of ``chunk`` (the partition-start rule): candidate ``k`` where ``first == k *
    chunk``, else candidate 0. With candidate ``k`` the word of partition ``(index + k *
    chunk) % partitions`` it rotates the partitions so that partition ``first``'s word comes to
    partition 0; with ``(index - k * chunk) % partitions`` it undoes that rotation."""
    value = rows[:DATA_BITS]
    for k in range(1, len(rows) // DATA_BITS):
        value = Mux(first == k * chunk, rows[k * DATA_BITS:(k + 1) * DATA_BITS], value)
    return value


def widen_operand(m: Module, word, dtype, name: str = "operand", words=0):
    """The fp32 bits of a scalar operand's element, ``word`` (a 32-bit word, the element in
    its low bits) of the type whose code is ``dtype``, as the core simulator widens it
    (combinational): fp32 as it is; a float or int8 element of :data:`WIDENED_OPERANDS`
    exactly (:class:`~hdl.numerics.fpu.Widen`: every NaN ``0x7FC00000``, int8 its value),
    tf32 from its code at the word's top; an int32 or uint32 word by value
    (:func:`int_word_to_fp32`) or, with ``words`` (:func:`~hdl.core.isa.integer_words`), as
    it is. The widening units are the submodules ``<name>_widen_<type>`` of ``m``."""
    value = Mux(_by_value(dtype, words), int_word_to_fp32(m, word, dtype), word)
    for dt in WIDENED_OPERANDS:
        fmt = format_by_name(dt)
        m.submodules[f"{name}_widen_{dt}"] = unit = Widen(WidenParams(fmt=fmt))
        m.d.comb += unit.x.eq(word[TF32_SHIFT:] if dt == "tf32" else word[:fmt.bits])
        value = Mux(dtype == DTYPES[dt][0], unit.y, value)
    return value


def load_operand(m: Module, reg, rows, first, shift, dtype, chunk: int, set_imm, imm,
                 set_operand, name: str, words=0) -> None:
    """A lane's scalar register ``reg`` (one operand of a partition's share of an engine):
    loaded with the immediate ``imm`` on ``set_imm``, or on ``set_operand`` with the
    operand's element, the word of ``rows`` rotated to the operand's first partition
    ``first`` (:func:`pick`), shifted down by its byte ``shift`` and widened from the type
    ``dtype`` (:func:`widen_operand`, its units named after ``name``; ``words`` as there)."""
    with m.If(set_imm):
        m.d.sync += reg.eq(imm)
    operand = widen_operand(m, pick(rows, first, chunk) >> (shift * 8), dtype, name, words)
    with m.If(set_operand):
        m.d.sync += reg.eq(operand)


def bitwise(op):
    """Whether the operation ``op`` (a :class:`~hdl.vector.ops.VectorOp` signal) is bitwise
    (combinational)."""
    out = 0
    for each in BITWISE_OPS:
        out = out | (op == each)
    return out


def _is_word(dtype):
    """Whether the type whose code is ``dtype`` is int32 or uint32 (combinational)."""
    return (dtype == DTYPES["int32"][0]) | (dtype == DTYPES["uint32"][0])


def int_word_to_fp32(m: Module, word, dtype):
    """The fp32 encoding of the int32 word ``word`` (a uint32 word, or a uint8 in its low
    byte, where ``dtype`` is their code), rounded to nearest even (combinational)."""
    value = Signal(signed(33))
    m.d.comb += value.eq(Mux(dtype == DTYPES["uint32"][0], Cat(word[:32], Const(0, 1)),
                             Mux(dtype == DTYPES["uint8"][0], word[:8],
                                 Cat(word[:32], word[31]))))
    return int_to_fp32(m, value)


def _by_value(dtype, words):
    """Whether an element of the type whose code is ``dtype`` goes through
    :func:`int_word_to_fp32`: uint8, and int32 and uint32 unless ``words``."""
    return (dtype == DTYPES["uint8"][0]) | (_is_word(dtype) & ~words)


def int_to_fp32(m: Module, value):
    """The fp32 encoding of the signed integer ``value``, rounded to nearest even."""
    negative = value[-1]
    mag = Signal(len(value))
    m.d.comb += mag.eq(Mux(negative, -value, value))
    lead = lzc(mag)
    sig = Signal(len(value))
    e_lead = Signal(range(-1, len(value)))
    m.d.comb += [sig.eq(mag << lead), e_lead.eq(len(value) - 1 - lead)]
    # a signal, not an expression: each use of an expression is elaborated anew
    out = Signal(32, name="int_fp32")
    m.d.comb += out.eq(Mux(mag == 0, 0, round_pack(m, FP32, negative, e_lead, sig)))
    return out


def nearest_integer(m: Module, bits):
    """The integer nearest the fp32 value ``bits``, ties to even, as a signed value of 35
    bits: a magnitude of 2**32 or more (infinities included) is 2**32; NaN 0
    (combinational)."""
    sign, exp, man = bits[31], bits[23:31], bits[:23]
    sig = Cat(man, Const(1, 1))  # 24 bits: |x| = sig * 2**(exp - 150)
    mag = Signal(33)
    shift, below = Signal(range(32)), Signal(range(32))
    m.d.comb += [shift.eq(150 - exp), below.eq(149 - exp)]
    whole, rest = Signal(24), Signal(24)
    m.d.comb += [whole.eq(sig >> shift), rest.eq(sig & ((Const(1, 25) << shift) - 1))]
    half = Const(1, 24) << below
    up = (rest > half) | ((rest == half) & whole[0])
    with m.If(exp >= 127 + 32):
        m.d.comb += mag.eq(1 << 32)
    with m.Elif(exp < 126):  # |x| < 0.5
        m.d.comb += mag.eq(0)
    with m.Elif(exp >= 150):  # an integer: the significand shifted up
        m.d.comb += mag.eq(sig << (exp - 150)[:4])
    with m.Else():
        m.d.comb += mag.eq(whole + up)
    value = Signal(signed(35))
    nan = (exp == 0xFF) & (man != 0)
    m.d.comb += value.eq(Mux(nan, 0, Mux(sign, -mag, mag)))
    return value


def saturated(value, width: int, is_signed: bool = True):
    """The ``width``-bit code of the signed ``value`` saturated to the signed (or unsigned)
    range of ``width`` bits (combinational)."""
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if is_signed else (0, (1 << width) - 1)
    return Mux(value > hi, hi, Mux(value < lo, lo, value)).as_unsigned()[:width]


def lane_input(m: Module, word, dtype, name: str, words=0):
    """The lane word the unit reads for a streamed element ``word`` (in its low bits) of the
    type whose code is ``dtype`` (combinational): int8, int32 and uint32 by value in fp32
    (the unit then reads fp32; with ``words``, :func:`~hdl.core.isa.integer_words`, an int32
    or uint32 word as it is), tf32's code moved down from the word's top, any other as it
    is. The widening unit is the submodule ``<name>_widen_int8`` of ``m``."""
    m.submodules[f"{name}_widen_int8"] = unit = Widen(WidenParams(fmt=format_by_name("int8")))
    m.d.comb += unit.x.eq(word[:8])
    return Mux(dtype == DTYPES["int8"][0], unit.y,
               Mux(_by_value(dtype, words), int_word_to_fp32(m, word, dtype),
                   Mux(dtype == DTYPES["tf32"][0], word >> TF32_SHIFT, word)))


def lane_output(m: Module, y, dtype, words=0):
    """The element written for the unit's result ``y`` (fp32 for an integer destination,
    else the format's code in the low bits) to a destination of the type whose code is
    ``dtype`` (combinational): the integer types by :func:`nearest_integer` and
    :func:`saturated` (with ``words`` an int32 or uint32 word as it is), tf32's code moved
    to the word's top, any other as it is."""
    near = nearest_integer(m, y)
    ints = Mux(dtype == DTYPES["int8"][0], saturated(near, 8),
               Mux(dtype == DTYPES["uint8"][0], saturated(near, 8, is_signed=False),
                   Mux(dtype == DTYPES["int32"][0], saturated(near, 32),
                       saturated(near, 32, is_signed=False))))
    return Mux((dtype == DTYPES["int8"][0]) | _by_value(dtype, words), ints,
               Mux(dtype == DTYPES["tf32"][0], y << TF32_SHIFT, y))


def with_zero(op, value):
    """Whether the comparison ``op`` (a :class:`~hdl.vector.ops.VectorOp` signal) of the
    signed integer ``value`` with 0 holds (combinational)."""
    neg, zero = value[-1], value == 0
    out = zero
    for cmp, flag in ((VectorOp.NOT_EQUAL, ~zero), (VectorOp.GREATER, ~neg & ~zero),
                      (VectorOp.GREATER_EQUAL, ~neg), (VectorOp.LESS, neg),
                      (VectorOp.LESS_EQUAL, neg | zero)):
        out = Mux(op == cmp, flag, out)
    return out


def unit_format(formats: tuple[str, ...], dtype):
    """The index in the unit's ``formats`` of the element type whose code is ``dtype``:
    its own, fp32's for the integer types (combinational)."""
    index = formats.index("fp32")
    for i, name in enumerate(formats):
        index = Mux(dtype == DTYPES[name][0], i, index)
    return index


class IotaLane(wiring.Component):
    """One partition's Iota value in fp32: ``y`` is the signed integer ``value`` rounded to
    nearest even (combinational). The GpSimd engine instantiates the emitted module
    (:data:`IOTA_MODULE`) once per partition instead of elaborating the conversion that
    many times."""

    def __init__(self):
        super().__init__({"value": In(signed(IOTA_BITS)), "y": Out(32)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.y.eq(int_to_fp32(m, self.value))
        return m


class EngineSlice(wiring.Component):
    """One partition's share of a vector (``kind`` "vector") or GpSimd engine ("gpsimd") of
    ``partitions`` partitions, the engine's partition ``index`` (also its lane), emitted
    once as a module (:data:`SLICE_MODULES`) and instantiated per partition, so that the
    engine's elaboration does not grow with its partitions.

    Read side: ``a`` and ``b`` are the lane's elements of the two sources, each rotated to the
    tile's first partition (``*_rows``: the ``ways`` candidate words ``data[(index + k * chunk)
    % partitions]``, ``*_first`` the tile's first partition, as :func:`pick` selects) and
    shifted down by its byte ``*_shift``, as the unit reads an element of the type
    ``*_dtype`` (:func:`lane_input`); ``scalar`` and ``scalar1`` are the lane's scalar
    operands (:func:`load_operand`), registers loaded with ``imm`` / ``imm1`` (``set_imm``) or
    with ``b_rows`` rotated to ``s_first`` / ``a_rows`` rotated to ``s1_first``, shifted
    down by the byte ``s_shift`` / ``s1_shift`` and widened to fp32 from the type ``s_dtype``
    / ``s1_dtype`` (``set_scalar`` / ``set_scalar1``). Write side: ``w_data`` is partition
    ``index``'s word, the unit's output (``y_rows``: ``y[(index - k * chunk) % partitions]``,
    unrotated from ``d_first`` by :func:`pick`) or memset's ``value``, as an element of
    the type ``d_dtype`` (:func:`lane_output`), placed at byte ``w_shift``; ``w_part``
    whether the partition is in the tile (``d_first``, ``d_count``). GpSimd's Iota: ``a`` is
    the lane's Iota value (:class:`IotaLane`) while ``iota``, from the base ``iota_base +
    index * iota_pstep`` loaded on ``set_base`` plus ``iota_at``; with ``iota_raw`` (into
    int32 or uint32) ``w_data`` is the integer itself, the base plus ``iota_w_at``. The vector
    engine's transpose: ``a_raw`` is the lane's element of ``a`` as it is stored, and with
    ``raw`` the unit's output is written as it comes (``y_rows`` then the transposed
    elements). ``words``: the instruction is bitwise, its int32 and uint32 elements and
    operands read and written as words (:func:`lane_input`, :func:`lane_output`). The vector
    engine's RangeSelect: ``fill`` while ``selecting`` unless both ``op0(place, scalar)``
    and ``op1(place, scalar1)`` hold (``place`` the element's place in fp32;
    :func:`~hdl.vector.fpcmp.holds`). GpSimd's AffineSelect: ``fill`` while ``affine``
    unless ``cmp`` of the Iota value of the element written with 0 holds.
    """

    def __init__(self, partitions: int, kind: str):
        self.kind, self.partitions = kind, partitions
        self.chunk = min(32, partitions)
        self.ways = partitions // self.chunk
        part = AP_LAYOUT.members["partition"]
        rows = In(DATA_BITS * self.ways)
        dtype = In(AP_LAYOUT.members["dtype"])
        members = {"index": In(range(partitions)), "a_rows": rows, "b_rows": rows,
                   "a_dtype": dtype, "b_dtype": dtype, "d_dtype": dtype,
                   "y_rows": rows, "a_first": In(part), "b_first": In(part),
                   "s_first": In(part), "s_shift": In(2),
                   "s_dtype": In(AP_LAYOUT.members["dtype"]), "s1_first": In(part),
                   "s1_shift": In(2), "s1_dtype": In(AP_LAYOUT.members["dtype"]),
                   "d_first": In(part),
                   "d_count": In(AP_LAYOUT.members["partitions"]), "a_shift": In(2),
                   "b_shift": In(2), "w_shift": In(2), "memset": In(1), "value": In(32),
                   "words": In(1),
                   "set_imm": In(1), "set_scalar": In(1), "set_scalar1": In(1),
                   "imm": In(32), "imm1": In(32), "a": Out(32), "b": Out(32),
                   "scalar": Out(32), "scalar1": Out(32), "w_data": Out(32),
                   "w_part": Out(1)}
        if kind == "vector":
            op_bits = field_positions(RangeSelect)["op0"][1]
            members.update({"raw": In(1), "a_raw": Out(32), "lane_mode": In(1),
                            "clear": In(1), "insert": In(1), "emit": In(1),
                            "emit_k": In(range(8)), "set_val": In(1), "match": In(1),
                            "chain": In(1), "at": In(INDEX_BITS), "miss_ones": In(1),
                            "found_at": Out(32), "replaced": Out(1), "selecting": In(1),
                            "place": In(32), "op0": In(op_bits), "op1": In(op_bits),
                            "fill": Out(1)})
        if kind == "gpsimd":
            members.update({"iota": In(1), "set_base": In(1), "iota_base": In(signed(32)),
                            "iota_pstep": In(signed(32)), "iota_at": In(signed(IOTA_BITS)),
                            "iota_raw": In(1), "iota_w_at": In(signed(IOTA_BITS)),
                            "affine": In(1), "cmp": In(field_positions(AffineSelect)["op"][1]),
                            "fill": Out(1)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        raw_a = pick(self.a_rows, self.a_first, self.chunk) >> (self.a_shift * 8)
        lane_a = lane_input(m, raw_a, self.a_dtype, "a", self.words)
        m.d.comb += self.b.eq(lane_input(m, pick(self.b_rows, self.b_first, self.chunk)
                                         >> (self.b_shift * 8), self.b_dtype, "b", self.words))
        for reg, rows, first, shift, dtype, imm, load, name in (
                (self.scalar, self.b_rows, self.s_first, self.s_shift, self.s_dtype, self.imm,
                 self.set_scalar, "operand0"),
                (self.scalar1, self.a_rows, self.s1_first, self.s1_shift, self.s1_dtype,
                 self.imm1, self.set_scalar1, "operand1")):
            load_operand(m, reg, rows, first, shift, dtype, self.chunk, self.set_imm, imm,
                         load, name, self.words)
        first = self.d_first
        if self.kind == "vector":  # lane ``index``'s own output in lane mode
            first = Mux(self.lane_mode, 0, self.d_first)
        result = pick(self.y_rows, first, self.chunk)
        out = lane_output(m, Mux(self.memset, self.value, result), self.d_dtype, self.words)
        if self.kind == "vector":
            out = Mux(self.raw, result, out)
            m.d.comb += self.a_raw.eq(raw_a)
            lane_a = Mux(self.emit, top8(m, result, self.clear, self.insert)[self.emit_k],
                         lane_a)
            found_at, replaced = match8(m, result, self)
            m.d.comb += [self.found_at.eq(found_at), self.replaced.eq(replaced)]
            # RangeSelect: the fill unless both comparisons of the place with the bounds hold
            m.d.comb += self.fill.eq(self.selecting & ~(holds(self.op0, self.place, self.scalar)
                                                        & holds(self.op1, self.place,
                                                                self.scalar1)))
        if self.kind == "gpsimd":
            lane_base = Signal(signed(IOTA_BITS))
            written = Signal(signed(IOTA_BITS))  # the Iota value of the element written
            m.d.comb += written.eq(lane_base + self.iota_w_at)
            out = Mux(self.iota_raw, written[:32], out)
            # AffineSelect: the fill unless the comparison of that value with 0 holds
            m.d.comb += self.fill.eq(self.affine & ~with_zero(self.cmp, written))
        m.d.comb += [self.w_data.eq(out << (self.w_shift * 8)),
                     self.w_part.eq((self.d_first <= self.index)
                                    & (self.index < self.d_first + self.d_count))]
        if self.kind == "gpsimd":
            with m.If(self.set_base):
                m.d.sync += lane_base.eq(self.iota_base + self.index * self.iota_pstep)
            y = Signal(32)
            add_lane(m, "iota", None, IOTA_MODULE,
                     {"value": (lane_base + self.iota_at)[:IOTA_BITS]}, {"y": y},
                     clocked=False)
            lane_a = Mux(self.iota, y, lane_a)
        m.d.comb += self.a.eq(lane_a)
        return m


class VectorEngine(wiring.Component):
    """The vector engine (``kind`` "vector") or GpSimd engine ("gpsimd": with ``Iota``) of a
    core of ``partitions`` partitions; ``words`` is the depth of the deeper of SBUF and PSUM
    in 32-bit words. Its lanes carry the chip's stochastic-rounding generator ``rng`` (the
    spec's), seeded with :data:`GENERATOR_SEED`; with ``rng`` None they round to nearest
    even only and have none (a chip whose spec has no stochastic rounding, whose programs
    the core simulator refuses to round stochastically). A memset's value is cast to
    nearest even, so its cast has no generator.

    The vector engine's ``Transpose`` (of at most ``transpose`` partitions and free elements,
    the core's ``vector_transpose``) bypasses the unit: the source's elements, one free index
    of every partition a cycle, fill a ``transpose`` x ``transpose`` buffer of words, which
    is then written one destination element of every partition a cycle, each as it was
    stored."""

    def __init__(self, partitions: int, words: int, kind: str = "vector", *,
                 rng: str | None, transpose: int = 0):
        if kind not in ENGINE_RUNS:
            raise ValueError(f"kind must be one of {', '.join(ENGINE_RUNS)}, not {kind!r}")
        if (transpose != 0) != (Transpose in ENGINE_RUNS[kind]) or not 0 <= transpose <= \
                partitions:
            raise ValueError(f"transpose must be 1 .. {partitions} on the vector engine, 0 on "
                             f"the {kind} engine, not {transpose!r}")
        self.kind = kind
        self.transpose = transpose
        self.partitions = partitions
        self.params = VectorParams(lanes=partitions, rng=rng, seed=GENERATOR_SEED)
        n = partitions
        super().__init__(engine_ports(("a", "b"), n, words))
        self.unit = Vector(self.params, lane_instances=True)

    def _sequence_bounds(self, m, src, wa, wd, x, a_shift, restart_a, start, writing,
                         bwrite, bound) -> None:
        """SequenceBounds' states (GpSimd; one partition, its elements ``x`` as lane 0 reads
        them): a pass over ``src`` writing each element's start, where its run of equal ids
        began (an id of 0, padding: the element count); a second pass writing, a run at a
        time once it ends, each element's end, one past the run's last element (padding:
        -1); each bound written as a memset's value (``bound``, ``bwrite``)."""
        n_total = 1
        for i in range(3):
            size = getattr(src, f"n{i}")
            n_total = n_total * Mux(size == 0, 1, size)
        second, last = Signal(), Signal()
        i, run_start, run_len = (Signal(signed(33), name=nm)
                                 for nm in ("b_i", "b_run_start", "b_run_len"))
        prev, flush, flush_val = Signal(32), Signal(signed(33)), Signal(signed(33))
        after = Signal(2)  # what follows a flush: read on, the last run's, done
        zero = Const(0, 32)
        pad, same, prev_pad = f_eq(x, zero), (i != 0) & f_eq(x, prev), f_eq(prev, zero)
        with m.State("B_READ"):
            m.d.comb += [self.a_en.eq(1), wa.step.eq(1)]
            m.d.sync += [a_shift.eq(wa.byte[:2]), last.eq(wa.row_last)]
            m.next = "B_DATA"
        with m.State("B_DATA"):
            m.d.sync += [prev.eq(x), i.eq(i + 1)]
            with m.If(~second):  # this element's start
                m.d.comb += [bwrite.eq(1), writing.eq(1), wd.step.eq(1),
                             bound.eq(Mux(pad, n_total, Mux(same, run_start, i)))]
                m.d.sync += run_start.eq(Mux(same, run_start, i))
                with m.If(last):
                    m.d.sync += [second.eq(1), i.eq(0)]
                    m.d.comb += restart_a.eq(1)
                m.next = "B_READ"
            with m.Elif(~same & (i != 0)):  # the run before this element ends here
                m.d.sync += [flush.eq(run_len), run_len.eq(1),
                             flush_val.eq(Mux(prev_pad, -1, i)),
                             after.eq(Mux(last, 1, 0))]
                m.next = "B_FLUSH"
            with m.Else():
                m.d.sync += run_len.eq(Mux(i == 0, 1, run_len + 1))
                m.next = "B_READ"
                with m.If(last):
                    m.next = "B_FINAL"
        with m.State("B_FINAL"):  # the last run
            m.d.sync += [flush.eq(run_len), flush_val.eq(Mux(prev_pad, -1, n_total)),
                         after.eq(2)]
            m.next = "B_FLUSH"
        with m.State("B_FLUSH"):  # a run's ends
            m.d.comb += [bwrite.eq(1), writing.eq(1), wd.step.eq(1), bound.eq(flush_val)]
            m.d.sync += flush.eq(flush - 1)
            with m.If(flush == 1):
                with m.Switch(after):
                    with m.Case(0):
                        m.next = "B_READ"
                    with m.Case(1):
                        m.next = "B_FINAL"
                    with m.Default():  # done; the passes' registers ready for the next
                        m.d.comb += self.done.eq(1)
                        m.d.sync += [second.eq(0), i.eq(0)]
                        m.next = "IDLE"

    def modules(self, *, unit: bool = True) -> dict[str, Callable[[], str]]:
        """The modules this engine instantiates (:data:`hdl.emitted.Modules`): its vector
        unit's (without ``unit``: left to another engine whose unit has the same lane), the
        Iota lane and its partition slice."""
        modules = dict(self.unit.modules()) if unit else {}
        if self.kind == "gpsimd":
            modules[IOTA_MODULE] = lambda: module_text(IotaLane(), IOTA_MODULE)
        slice_module = SLICE_MODULES[self.kind]
        modules[slice_module] = lambda: module_text(EngineSlice(self.partitions, self.kind),
                                                    slice_module)
        return modules

    def elaborate(self, platform):
        m = Module()
        n = self.partitions
        chunk = min(32, n)
        m.submodules.unit = unit = self.unit
        word = Signal(WORD_BITS)
        opcode = word[:8]

        def field(cls, name):
            pos, bits, kind = field_positions(cls)[name]
            value = word[pos:pos + bits]
            return data.View(AP_LAYOUT, value) if kind == "ap" else value

        dst, a, b, s0, s1 = (Signal(AP_LAYOUT, name=nm) for nm in ("dst", "a", "b", "s0", "s1"))
        op, op1, reduce = Signal(VectorOp), Signal(VectorOp), Signal(Reduce)
        use_scalar, memset, iota, imm, imm1 = Signal(), Signal(), Signal(), Signal(32), \
            Signal(32)
        scan, reverse0, reverse1, stochastic = Signal(), Signal(), Signal(), Signal()
        draw = Signal(Draw)  # Random's and Dropout's draws
        transposing, shuffling, selecting, bounding = Signal(), Signal(), Signal(), Signal()
        affine = Signal()  # GpSimd's AffineSelect
        # GpSimd's NonzeroWithCount, a core (``nz_core``: its first partition) at a time: the
        # source's positions read and the nonzero ones written in turn (NZ_SCAN), the
        # padding after them, the count last
        nonzero = Signal()
        # Max8: the search (the source through the unit, each lane's values into its list),
        # then the emission (the lists through the unit into dst)
        maxing, emit_phase = Signal(), Signal()
        # FindIndex8 and MatchReplace8 (``finding``; ``replacing`` the latter): their 8
        # values read (element by element at ``vals_at``), the search, MatchReplace8's copy
        # of its data with the matches replaced (phase 1), the indices written (phase 2)
        finding, replacing, has_idx = Signal(), Signal(), Signal()
        phase, vals_at = Signal(2), Signal(AP_LAYOUT.members["offset"])
        searching = (maxing & ~emit_phase) | (finding & (phase == 0))
        emitting = maxing & emit_phase
        writing_idx = finding & (phase == 2)
        found_ats = [Signal(32, name=f"slice{p}_found_at") for p in range(n)
                     if FindIndex8 in ENGINE_RUNS[self.kind]]
        replaced = [Signal(name=f"slice{p}_replaced") for p in range(n)
                    if FindIndex8 in ENGINE_RUNS[self.kind]]
        fills = [Signal(name=f"slice{p}_fill") for p in range(n)
                 if {RangeSelect, AffineSelect} & set(ENGINE_RUNS[self.kind])]
        k8, emit_k, clear, set_val = Signal(range(9)), Signal(range(8)), Signal(), Signal()
        # TensorCopyDynamic: the offset's AP (``place``), the source moved by ``moved`` bytes
        # once the offset is read (``placed``)
        place, dynamic, placed = Signal(AP_LAYOUT), Signal(), Signal()
        moved = Signal(signed(MOVED_BITS))
        with m.Switch(opcode):
            with m.Case(TensorTensor.OPCODE):
                m.d.comb += [dst.eq(field(TensorTensor, "dst")), a.eq(field(TensorTensor, "a")),
                             b.eq(field(TensorTensor, "b")), op.eq(field(TensorTensor, "op")),
                             stochastic.eq(field(TensorTensor, "rounding"))]
            with m.Case(TensorScalar.OPCODE):
                m.d.comb += [dst.eq(field(TensorScalar, "dst")),
                             a.eq(field(TensorScalar, "src")),
                             s0.eq(field(TensorScalar, "operand0")),
                             op.eq(field(TensorScalar, "op0")), use_scalar.eq(1),
                             imm.eq(field(TensorScalar, "imm0")),
                             s1.eq(field(TensorScalar, "operand1")),
                             op1.eq(field(TensorScalar, "op1")),
                             imm1.eq(field(TensorScalar, "imm1")),
                             stochastic.eq(field(TensorScalar, "rounding"))]
            with m.Case(TensorReduce.OPCODE):
                m.d.comb += [dst.eq(field(TensorReduce, "dst")),
                             a.eq(field(TensorReduce, "src")),
                             op.eq(field(TensorReduce, "op")),
                             reduce.eq(field(TensorReduce, "reduce"))]
            with m.Case(TensorCopy.OPCODE):
                m.d.comb += [dst.eq(field(TensorCopy, "dst")), a.eq(field(TensorCopy, "src")),
                             op.eq(VectorOp.COPY),
                             stochastic.eq(field(TensorCopy, "rounding"))]
            with m.Case(Memset.OPCODE):
                m.d.comb += [dst.eq(field(Memset, "dst")), memset.eq(1),
                             imm.eq(field(Memset, "value"))]
            with m.Case(TensorCopyDynamic.OPCODE):
                f = partial(field, TensorCopyDynamic)
                src, assign = moved_source(f("src"), moved)
                m.d.comb += [*assign, dst.eq(f("dst")), a.eq(src), place.eq(f("offset")),
                             op.eq(VectorOp.COPY), dynamic.eq(1)]
            if TensorTensorScan in ENGINE_RUNS[self.kind]:
                with m.Case(TensorTensorScan.OPCODE):
                    f = partial(field, TensorTensorScan)
                    m.d.comb += [dst.eq(f("dst")), a.eq(f("a")), b.eq(f("b")),
                                 s0.eq(f("initial")), imm.eq(f("imm")), op.eq(f("op0")),
                                 op1.eq(f("op1")), scan.eq(1), reverse0.eq(f("reverse0")),
                                 reverse1.eq(f("reverse1")), stochastic.eq(f("rounding"))]
            if self.transpose:
                with m.Case(Transpose.OPCODE):
                    m.d.comb += [dst.eq(field(Transpose, "dst")), a.eq(field(Transpose, "src")),
                                 transposing.eq(1)]
            if StreamShuffle in ENGINE_RUNS[self.kind]:
                with m.Case(StreamShuffle.OPCODE):
                    m.d.comb += [dst.eq(field(StreamShuffle, "dst")),
                                 a.eq(field(StreamShuffle, "src")), shuffling.eq(1)]
            if Max8 in ENGINE_RUNS[self.kind]:
                with m.Case(Max8.OPCODE):
                    m.d.comb += [dst.eq(field(Max8, "dst")), a.eq(field(Max8, "src")),
                                 op.eq(VectorOp.COPY), maxing.eq(1)]
            if FindIndex8 in ENGINE_RUNS[self.kind]:
                with m.Case(FindIndex8.OPCODE):
                    f = partial(field, FindIndex8)
                    m.d.comb += [dst.eq(f("dst")), a.eq(f("data")), b.eq(f("vals")),
                                 s0.eq(f("vals")), s0.offset.eq(vals_at), op.eq(VectorOp.COPY),
                                 finding.eq(1)]
                with m.Case(MatchReplace8.OPCODE):
                    f = partial(field, MatchReplace8)
                    m.d.comb += [dst.eq(Mux(phase == 2, f("dst_idx"), f("dst"))),
                                 a.eq(f("data")), b.eq(f("vals")), s0.eq(f("vals")),
                                 s0.offset.eq(vals_at), op.eq(VectorOp.COPY),
                                 imm.eq(f("imm")), finding.eq(1), replacing.eq(1),
                                 has_idx.eq(f("dst_idx").partitions != 0)]
            if RangeSelect in ENGINE_RUNS[self.kind]:
                with m.Case(RangeSelect.OPCODE):
                    f = partial(field, RangeSelect)
                    m.d.comb += [dst.eq(f("dst")), a.eq(f("src")), s0.eq(f("bound0")),
                                 s1.eq(f("bound1")), op.eq(VectorOp.COPY), imm.eq(f("fill")),
                                 selecting.eq(1)]
            if Random in ENGINE_RUNS[self.kind]:
                with m.Case(Random.OPCODE):
                    m.d.comb += [dst.eq(field(Random, "dst")), a.eq(field(Random, "dst")),
                                 op.eq(VectorOp.COPY), draw.eq(Draw.UNIFORM)]
                with m.Case(Dropout.OPCODE):
                    f = partial(field, Dropout)
                    m.d.comb += [dst.eq(f("dst")), a.eq(f("src")), s0.eq(f("prob")),
                                 imm.eq(f("imm")), op.eq(VectorOp.COPY),
                                 draw.eq(Draw.DROPOUT)]
            if self.kind == "gpsimd":
                with m.Case(Iota.OPCODE):
                    m.d.comb += [dst.eq(field(Iota, "dst")), a.eq(field(Iota, "dst")),
                                 op.eq(VectorOp.COPY), iota.eq(1)]
                with m.Case(AffineSelect.OPCODE):
                    m.d.comb += [dst.eq(field(AffineSelect, "dst")),
                                 a.eq(field(AffineSelect, "src")), op.eq(VectorOp.COPY),
                                 imm.eq(field(AffineSelect, "fill")), affine.eq(1)]
                with m.Case(SequenceBounds.OPCODE):
                    m.d.comb += [dst.eq(field(SequenceBounds, "dst")),
                                 a.eq(field(SequenceBounds, "src")), bounding.eq(1)]
                with m.Case(NonzeroWithCount.OPCODE):
                    m.d.comb += [dst.eq(field(NonzeroWithCount, "dst")),
                                 a.eq(field(NonzeroWithCount, "src")), nonzero.eq(1)]

        restart_a = Signal()  # SequenceBounds' second pass over its source
        m.submodules.wa = wa = ApWalker()
        m.submodules.wb = wb = ApWalker()
        m.submodules.wd = wd = ApWalker()
        start = Signal()
        m.d.comb += [wa.ap.eq(a), wb.ap.eq(b), wd.ap.eq(Mux(searching, a, dst)),
                     wa.start.eq(start | restart_a), wb.start.eq(start), wd.start.eq(start)]

        words = bitwise(op) | bitwise(op1)  # isa.integer_words
        formats = self.params.formats
        in_format = Mux(iota | emitting, formats.index("fp32"), unit_format(formats, a.dtype))
        b_format, out_format = unit_format(formats, b.dtype), unit_format(formats, dst.dtype)
        m.d.comb += [unit.op.eq(op), unit.op1.eq(op1), unit.reduce.eq(reduce),
                     unit.use_scalar.eq(use_scalar), unit.scan.eq(scan),
                     unit.reverse0.eq(reverse0), unit.reverse1.eq(reverse1),
                     unit.in_format.eq(in_format), unit.b_format.eq(b_format),
                     unit.out_format.eq(Mux(searching, formats.index("fp32"), out_format)),
                     unit.stochastic.eq(stochastic), unit.draw.eq(draw)]

        # the read side: a (and b) of every partition, one cycle after the address
        s1_valid, s1_last, sent = Signal(), Signal(), Signal()
        a_shift, b_shift = Signal(2), Signal(2)
        m.d.comb += [
            self.a_addr.eq(wa.byte[2:]),
            self.b_addr.eq(wb.byte[2:]),
            self.a_psum.eq(a.space == SPACE["psum"]), self.b_psum.eq(b.space == SPACE["psum"]),
            unit.i.valid.eq(s1_valid & ~transposing & ~shuffling),
            unit.i.payload.last.eq(s1_last),
        ]
        # Iota: lane l's element i is base + l * pstep + i * step (``step_sum``: i * step of
        # the element being read, ``iota_at`` of the element entering the unit)
        if self.kind == "gpsimd":
            step_sum, iota_at = Signal(signed(IOTA_BITS)), Signal(signed(IOTA_BITS))
            iota_w_at = Signal(signed(IOTA_BITS))  # i * step of the element being written
            set_base = Signal()
            # NonzeroWithCount: the lanes' base (the offset, the padding, 0 for the count),
            # the core searched, the next position read, how many were found
            nz_base = Signal(signed(32))
            m.d.comb += nz_base.eq(field(NonzeroWithCount, "offset").as_signed())
            nz_core = Signal(range(max(2, n // GPSIMD_CORE_PARTITIONS + 1)))
            nz_at, nz_found = Signal(IOTA_BITS), Signal(IOTA_BITS)
            nz_valid, nz_last, nz_sent = Signal(), Signal(), Signal()

        # the write side: dst's next element, in the tile's partitions
        m.submodules.memset_cast = memset_cast = FormatCastLane(
            tuple(format_by_name(f) for f in self.params.formats), None)
        m.d.comb += [memset_cast.x.eq(imm), memset_cast.fmt.eq(out_format)]
        # fp32 bits for fp32 and the integer types (the slice writes them), else the cast
        value = Mux(unit_format(formats, dst.dtype) == formats.index("fp32"), imm,
                    memset_cast.y)
        # SequenceBounds: its bounds written as a memset's fp32 value (to fp32 or int32)
        bound, bwrite = Signal(signed(33)), Signal()
        value = Mux(bounding, int_to_fp32(m, bound), value)
        writing = Signal()
        m.d.comb += [self.w_addr.eq(wd.byte[2:]), self.w_psum.eq(dst.space == SPACE["psum"])]
        item_mask = (1 << (1 << dtype_shift(dst.dtype))) - 1
        m.d.comb += self.w_be.eq(Mux(writing, item_mask << wd.byte[:2], 0))

        # every partition's share of the above: one slice each (lane l is partition l)
        set_imm, set_scalar, set_scalar1 = Signal(), Signal(), Signal()
        ways = [k * chunk for k in range(n // chunk)]
        slices = {name: [] for name in ("a", "b", "scalar", "scalar1", "w_data", "w_part",
                                        "a_raw", "found_at", "replaced", "fill")}
        # the transpose: buffer[l][c] holds the source's element c of its partition l; a
        # write of destination element j gives destination partition f buffer[j][f]
        size = self.transpose
        buffer = [[Signal(32, name=f"transpose_{row}_{c}") for c in range(size)]
                  for row in range(size)]
        t_col, t_row = Signal(range(size + 1)), Signal(range(size + 1))
        # the shuffle: lane l (dst's partition l from its first) takes the element of lane
        # 32 q + entry, as stored, for l = 32 q + i and entry the shuffle's entry i
        a_raws = [Signal(32, name=f"slice{p}_a_raw") for p in range(n)
                  if self.kind == "vector"]
        at = field_positions(StreamShuffle)["shuffle"][0]
        entries = [word[at + 8 * i:at + 8 * i + 8] for i in range(SHUFFLE_LANES)]
        # a shuffle's kept partitions are not written: partition P is lane (P - dst's first)
        kept = Signal(n)
        m.d.comb += kept.eq(by_partition([shuffling & (entries[lane % SHUFFLE_LANES]
                                                       == SHUFFLE_KEEP) for lane in range(n)],
                                         dst.partition, ways))
        # NonzeroWithCount writes the first partition of the core it searches, no other
        searched_not = Signal(n)
        if self.kind == "gpsimd":
            active = dst.partition + nz_core * GPSIMD_CORE_PARTITIONS
            m.d.comb += searched_not.eq(Cat(*[nonzero & (active != part)
                                              for part in range(n)]))
        # RangeSelect's fills by partition (set below) and the place of the element written
        filled = Signal(n)
        index = Signal(signed(IOTA_BITS), name="select_index")
        # RangeSelect: the place of the element written (start + its index) in fp32, which
        # each slice compares with its lane's bounds
        place_f = int_to_fp32(m, index) if fills else None
        lane_y = []
        for lane in range(n):
            y = unit.o.payload[lane]
            if lane < size:
                y = Mux(transposing, Array(buffer[j][lane] for j in range(size))[t_row], y)
            if self.kind == "vector":
                q = lane - lane % SHUFFLE_LANES
                sources = Array(a_raws[q + j] for j in range(min(SHUFFLE_LANES, n - q)))
                y = Mux(shuffling, sources[entries[lane % SHUFFLE_LANES]], y)
                y = Mux(writing_idx, found_ats[lane], y)
            lane_y.append(y)
        for p in range(n):
            inputs = {
                "index": Const(p, range(n)),
                "a_rows": Cat(*[self.a_data[(p + k) % n] for k in ways]),
                "b_rows": Cat(*[self.b_data[(p + k) % n] for k in ways]),
                "y_rows": Cat(*[lane_y[(p - k) % n] for k in ways]),
                "a_dtype": a.dtype, "b_dtype": b.dtype, "d_dtype": dst.dtype,
                "a_first": a.partition, "b_first": b.partition, "s_first": s0.partition,
                "s_shift": s0.offset[:2], "s_dtype": s0.dtype, "s1_first": s1.partition,
                "s1_shift": s1.offset[:2], "s1_dtype": s1.dtype,
                "d_first": dst.partition, "d_count": dst.partitions,
                "a_shift": a_shift, "b_shift": b_shift, "w_shift": wd.byte[:2],
                "memset": memset | filled[p] | bwrite, "value": value, "set_imm": set_imm,
                "set_scalar": set_scalar, "set_scalar1": set_scalar1, "imm": imm,
                "imm1": imm1, "words": words}
            outputs = {name: Signal(width, name=f"slice{p}_{name}")
                       for name, width in (("a", 32), ("b", 32), ("scalar", 32),
                                           ("scalar1", 32), ("w_data", 32), ("w_part", 1))}
            if self.kind == "vector":
                inputs.update({"raw": transposing | shuffling | writing_idx,
                               "lane_mode": searching, "clear": clear,
                               "insert": maxing & searching & unit.o.valid,
                               "emit": emitting, "emit_k": emit_k, "set_val": set_val,
                               "match": finding & searching & unit.o.valid,
                               "chain": replacing, "at": index[:INDEX_BITS],
                               "miss_ones": ~replacing, "selecting": selecting,
                               "place": place_f, "op0": field(RangeSelect, "op0"),
                               "op1": field(RangeSelect, "op1")})
                outputs.update({"a_raw": a_raws[p], "found_at": found_ats[p],
                                "replaced": replaced[p], "fill": fills[p]})
            for name, signal in outputs.items():
                slices[name].append(signal)
            if self.kind == "gpsimd":
                inputs.update({"iota": iota, "set_base": set_base,
                               "iota_base": Mux(nonzero, nz_base,
                                                field(Iota, "base").as_signed()),
                               "iota_pstep": Mux(nonzero, 0, field(Iota, "pstep").as_signed()),
                               "iota_at": iota_at,
                               "iota_raw": (iota | nonzero)
                               & ((dst.dtype == DTYPES["int32"][0])
                                  | (dst.dtype == DTYPES["uint32"][0])),
                               "iota_w_at": iota_w_at, "affine": affine,
                               "cmp": field(AffineSelect, "op")})
                outputs["fill"] = fills[p]
            add_lane(m, f"slice{p}", None, SLICE_MODULES[self.kind], inputs, outputs)
        # lane l's element written is the fill where its slice says so (RangeSelect) and at
        # MatchReplace8's matches in its copy (phase 1)
        fill_lane = [(fills[lane] if fills else 0)
                     | (replacing & (phase == 1) & replaced[lane] if replaced else 0)
                     for lane in range(n)]
        m.d.comb += filled.eq(by_partition(fill_lane, dst.partition, ways))
        # each wide signal assigned whole (Amaranth resolves every bit of a signal for each
        # part of it an instance drives: quadratic in the partitions)
        m.d.comb += [unit.i.payload.a.eq(Cat(*slices["a"])),
                     unit.i.payload.b.eq(Cat(*slices["b"])),
                     unit.scalar.eq(Cat(*slices["scalar"])),
                     unit.scalar1.eq(Cat(*slices["scalar1"])),
                     self.w_data.eq(Cat(*slices["w_data"])),
                     self.w_part.eq(Cat(*slices["w_part"]) & ~kept & ~searched_not)]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += clear.eq(self.issue)  # Max8's lists
                with m.If(self.issue):
                    m.d.sync += [word.eq(self.word), placed.eq(0), moved.eq(0),
                                 emit_phase.eq(0), phase.eq(0)]
                    m.next = "SETUP"
            with m.State("PLACE"):
                # the offset's word through port b (SBUF), then v * stride elements
                m.d.comb += [self.b_addr.eq(place.offset[2:]), self.b_en.eq(1),
                             self.b_psum.eq(0)]
                m.next = "PLACE_DATA"
            with m.State("PLACE_DATA"):
                v = Array(self.b_data[p] for p in range(n))[place.partition]
                m.d.sync += [moved.eq(moved_bytes(v, word, a.dtype)), placed.eq(1)]
                m.next = "SETUP"
            with m.State("SETUP"):
                with m.If(dynamic & ~placed):
                    m.next = "PLACE"
                with m.Else():
                    m.d.comb += start.eq(1)
                    m.d.sync += [sent.eq(0), s1_valid.eq(0)]
                    m.d.comb += set_imm.eq(1)
                    if size:
                        m.d.sync += [t_col.eq(0), t_row.eq(0)]
                    with m.If(memset):
                        m.next = "MEMSET"
                    with m.Elif(transposing if size else 0):
                        if size:
                            m.next = "T_READ"
                    with m.Elif(shuffling):
                        m.next = "SHUFFLE"
                    with m.Elif(finding):
                        m.d.sync += k8.eq(0)
                        m.next = "VAL_READ"
                    with m.Elif(bounding):
                        if SequenceBounds in ENGINE_RUNS[self.kind]:
                            m.next = "B_READ"
                    with m.Elif(nonzero):
                        if self.kind == "gpsimd":
                            m.d.sync += [nz_core.eq(0), nz_at.eq(0), nz_found.eq(0),
                                         nz_valid.eq(0), nz_sent.eq(0)]
                            m.next = "NZ_SCAN"
                    with m.Elif((use_scalar | scan | selecting | (draw == Draw.DROPOUT))
                                & ((s0.partitions != 0) | (s1.partitions != 0))):
                        m.next = "SCALAR"
                    with m.Else():
                        m.next = "STREAM"
                    m.d.sync += index.eq(Mux(selecting, field(RangeSelect, "start").as_signed(),
                                             0))
                    if self.kind == "gpsimd":
                        m.d.sync += [step_sum.eq(0), iota_w_at.eq(0)]
                        m.d.comb += set_base.eq(1)
            with m.State("SCALAR"):
                # each operand's one element per partition: operand0 through port b,
                # operand1 through port a
                m.d.comb += [self.b_addr.eq(s0.offset[2:]), self.b_en.eq(1),
                             self.b_psum.eq(s0.space == SPACE["psum"]),
                             self.a_addr.eq(s1.offset[2:]), self.a_en.eq(1),
                             self.a_psum.eq(s1.space == SPACE["psum"])]
                m.next = "SCALAR_DATA"
            with m.State("SCALAR_DATA"):
                m.d.comb += [set_scalar.eq(s0.partitions != 0),
                             set_scalar1.eq(s1.partitions != 0)]
                m.next = "STREAM"
            with m.State("STREAM"):
                adv = ~s1_valid | unit.i.ready
                m.d.comb += [self.a_en.eq(adv), self.b_en.eq(adv)]
                with m.If(adv):
                    m.d.sync += s1_valid.eq(~sent)
                    with m.If(~sent):
                        m.d.comb += [wa.step.eq(1), wb.step.eq(1)]
                        m.d.sync += [s1_last.eq(wa.row_last), a_shift.eq(wa.byte[:2]),
                                     b_shift.eq(wb.byte[:2]), sent.eq(wa.row_last)]
                        if self.kind == "gpsimd":
                            m.d.sync += [iota_at.eq(step_sum), step_sum.eq(
                                step_sum + field(Iota, "step").as_signed())]
                m.d.comb += [unit.o.ready.eq(1), writing.eq(unit.o.valid & ~searching)]
                with m.If(unit.o.valid):
                    m.d.comb += wd.step.eq(1)
                    m.d.sync += index.eq(index + 1)
                    if self.kind == "gpsimd":
                        m.d.sync += iota_w_at.eq(iota_w_at + field(Iota, "step").as_signed())
                    with m.If(wd.row_last & searching & maxing):
                        m.d.sync += emit_phase.eq(1)
                        m.next = "EMIT_SETUP"
                    with m.Elif(wd.row_last & searching & replacing):
                        m.d.sync += phase.eq(1)
                        m.next = "SEARCH_SETUP"
                    with m.Elif(wd.row_last & (searching | (replacing & has_idx))):
                        m.d.sync += phase.eq(2)
                        m.next = "IDX_SETUP"
                    with m.Elif(wd.row_last):
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
            with m.State("VAL_READ"):  # FindIndex8, MatchReplace8: value k8 of every lane
                m.d.comb += [self.b_addr.eq(wb.byte[2:]), self.b_en.eq(1),
                             self.b_psum.eq(b.space == SPACE["psum"]), wb.step.eq(1)]
                m.d.sync += [vals_at.eq(wb.byte), emit_k.eq(k8)]
                m.next = "VAL_DATA"
            with m.State("VAL_DATA"):  # widened into each lane's scalar register
                m.d.comb += set_scalar.eq(1)
                m.next = "VAL_STORE"
            with m.State("VAL_STORE"):
                m.d.comb += set_val.eq(1)
                m.d.sync += k8.eq(k8 + 1)
                with m.If(k8 == 7):
                    m.next = "SEARCH_SETUP"
                with m.Else():
                    m.next = "VAL_READ"
            with m.State("SEARCH_SETUP"):  # the search, or MatchReplace8's copy after it
                m.d.comb += start.eq(1)
                m.d.sync += [sent.eq(0), s1_valid.eq(0), index.eq(0)]
                m.next = "STREAM"
            with m.State("IDX_SETUP"):  # the indices' walk
                m.d.comb += start.eq(1)
                m.d.sync += emit_k.eq(0)
                m.next = "IDX_WRITE"
            with m.State("IDX_WRITE"):  # index emit_k of every lane, as it is
                m.d.comb += [writing.eq(1), wd.step.eq(1)]
                m.d.sync += emit_k.eq(emit_k + 1)
                with m.If(wd.row_last):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
            with m.State("EMIT_SETUP"):  # Max8: the walkers again, dst's now
                m.d.comb += start.eq(1)
                m.d.sync += [sent.eq(0), s1_valid.eq(0), k8.eq(0)]
                m.next = "EMIT"
            with m.State("EMIT"):
                # list entry k of every lane into the unit, as a source element would be
                adv = ~s1_valid | unit.i.ready
                with m.If(adv):
                    m.d.sync += s1_valid.eq(~sent)
                    with m.If(~sent):
                        m.d.sync += [emit_k.eq(k8), k8.eq(k8 + 1), s1_last.eq(k8 == 7),
                                     sent.eq(k8 == 7)]
                m.d.comb += [unit.o.ready.eq(1), writing.eq(unit.o.valid)]
                with m.If(unit.o.valid):
                    m.d.comb += wd.step.eq(1)
                    with m.If(wd.row_last):
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
            if size:
                with m.State("T_READ"):
                    # the source's next free index of every partition, into the buffer's
                    # column t_col the cycle after its address
                    m.d.comb += self.a_en.eq(~sent)
                    m.d.sync += s1_valid.eq(~sent)
                    with m.If(~sent):
                        m.d.comb += wa.step.eq(1)
                        m.d.sync += [a_shift.eq(wa.byte[:2]), sent.eq(wa.row_last)]
                    with m.If(s1_valid):
                        m.d.sync += t_col.eq(t_col + 1)
                        with m.Switch(t_col):
                            for c in range(size):
                                with m.Case(c):
                                    m.d.sync += [buffer[lane][c].eq(slices["a_raw"][lane])
                                                 for lane in range(size)]
                        with m.If(sent):
                            m.next = "T_WRITE"
                with m.State("T_WRITE"):
                    # destination element t_row of every partition
                    m.d.comb += [writing.eq(1), wd.step.eq(1)]
                    m.d.sync += t_row.eq(t_row + 1)
                    with m.If(wd.row_last):
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
            with m.State("SHUFFLE"):
                # the source's next free index of every partition, then (the cycle after its
                # address) the destination's, each partition's from the lane it takes
                read_step(m, 1, self.a_en, wa, sent, s1_valid, s1_last, a_shift)
                with m.If(s1_valid):
                    m.d.comb += [writing.eq(1), wd.step.eq(1)]
                    with m.If(wd.row_last):
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
            if SequenceBounds in ENGINE_RUNS[self.kind]:
                self._sequence_bounds(m, a, wa, wd, slices["a"][0], a_shift, restart_a, start,
                                      writing, bwrite, bound)
            with m.State("MEMSET"):
                m.d.comb += [writing.eq(1), wd.step.eq(1)]
                with m.If(wd.row_last):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
            if self.kind == "gpsimd":
                self._nonzero(m, a, dst, wa, wd, start, set_base, writing, iota_w_at, nz_base,
                              field(NonzeroWithCount, "padding").as_signed(), nz_core, nz_at,
                              nz_found, nz_valid, nz_last, nz_sent)
        return m

    def _nonzero(self, m, src, dst, wa, wd, start, set_base, writing, iota_w_at, nz_base,
                 padding, core, at, found, valid, last, sent):
        """NonzeroWithCount's states, for core ``core`` (its first partition): each position
        of the source read (a cycle after its address, ``valid``) and, where the core's
        element is not zero, written as ``offset + position`` at dst's next element (the
        lanes' base the offset, the position through ``iota_w_at``); then the padding up to
        dst's last element, which takes the count; then the next core, or done."""
        rows = Array(self.a_data)
        per = GPSIMD_CORE_PARTITIONS
        word = rows[src.partition + core * per]
        hit = Mux(src.dtype == DTYPES["fp32"][0], word[:31].any(), word.any())
        with m.State("NZ_SCAN"):
            m.d.comb += self.a_en.eq(~sent)
            with m.If(~sent):
                m.d.comb += wa.step.eq(1)
                m.d.sync += [valid.eq(1), last.eq(wa.row_last), sent.eq(wa.row_last),
                             iota_w_at.eq(at), at.eq(at + 1)]
            with m.Else():
                m.d.sync += valid.eq(0)
            with m.If(valid & hit):
                m.d.comb += [writing.eq(1), wd.step.eq(1)]
                m.d.sync += found.eq(found + 1)
            with m.If(valid & last):
                m.next = "NZ_PAD_SETUP"
        with m.State("NZ_PAD_SETUP"):  # the lanes' base the padding
            m.d.comb += [nz_base.eq(padding), set_base.eq(1)]
            m.d.sync += iota_w_at.eq(0)
            m.next = "NZ_PAD"
        with m.State("NZ_PAD"):
            with m.If(wd.row_last):
                m.next = "NZ_COUNT_SETUP"
            with m.Else():
                m.d.comb += [writing.eq(1), wd.step.eq(1)]
        with m.State("NZ_COUNT_SETUP"):  # the lanes' base 0, the count through iota_w_at
            m.d.comb += [nz_base.eq(0), set_base.eq(1)]
            m.d.sync += iota_w_at.eq(found)
            m.next = "NZ_COUNT"
        with m.State("NZ_COUNT"):
            m.d.comb += writing.eq(1)
            with m.If((core + 1) * per < dst.partitions):  # the next core
                m.d.comb += [start.eq(1), set_base.eq(1)]
                m.d.sync += [core.eq(core + 1), at.eq(0), found.eq(0), valid.eq(0),
                             sent.eq(0)]
                m.next = "NZ_SCAN"
            with m.Else():
                m.d.comb += self.done.eq(1)
                m.next = "IDLE"
