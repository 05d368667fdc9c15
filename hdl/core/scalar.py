# amaranth: UnusedElaboratable=no
# (Amaranth's documented lint option: the elaboratables made here for their signatures are
# emitted apart, as modules of their own, and never elaborated where they are made.)
"""The core's scalar (activation) engine: the activation unit
(:class:`hdl.vector.activation.Activation`) fed from and writing to SBUF and PSUM through
the access patterns of ``Activation``, and beside it a vector unit of as many lanes
(:class:`hdl.vector.vector.Vector`) for ``TensorScalar``, ``TensorCopy`` and
``TensorCopyDynamic`` (its offset read through the port first, its source moved as the vector
engine moves it).

The units have ``lanes`` lanes (the core's ``activation_lanes``: one per partition at full
scale, fewer at simulation scale, see :func:`hdl.params.core_params`); the partitions of a
tile are served in turn, ``lanes`` at a time (group ``g`` takes the tile's partitions
``g * lanes`` .. ``(g + 1) * lanes - 1``, lane ``l`` the ``l``-th of them).

Per instruction: decode, then for a ``bias`` operand (``TensorScalar``'s ``operand0``) one
read of its element in every partition, and one more for ``TensorScalar``'s ``operand1``
(the read port is one: a cycle after the first, or alone), then per group the stream: every
cycle the next element of ``src`` is read from all partitions at once, one cycle later the group's
partitions enter the unit (widened from ``src``'s type by the unit), and every result beat
(already cast to ``dst``'s type by the unit) is written to ``dst`` at
the destination pattern's next element, in the group's partitions of the tile only. With
``reduce_dst``, the running sum of the group's last beat is written to it first (one cycle
on the write port, the unit stalled). One read port and one write port.

The bias (``TensorScalar``'s ``operand0``) and ``operand1`` are widened to fp32 as they are
loaded, from any type of :data:`~hdl.core.engines.OPERAND_DTYPES`, each element taken at its
byte in its word (:func:`~hdl.core.engines.load_operand`, as the core simulator reads them).
``TensorScalar`` runs ``op1(op0(src, s0), s1)`` in one pass through the vector unit, as on the
vector engine.

What this datapath runs (:func:`supported` says why not otherwise): ``Activation`` with
``src`` and ``dst`` of a type the unit reads and writes (``formats``), a ``bias`` of
:data:`~hdl.core.engines.OPERAND_DTYPES` and a ``reduce_dst`` of one of ``formats`` (its
sums cast to nearest even); ``TensorScalar``,
``TensorCopy`` and ``TensorCopyDynamic`` as the vector engine runs them
(:func:`hdl.core.engines.operand_refusal`). Casts round to nearest even or, where the
instruction says so, stochastically by the lanes' generators (seeded with
:data:`~hdl.core.engines.GENERATOR_SEED`, each advancing once per output beat of its unit,
as :func:`sim.core.data.unit_beats` states it).
"""

from __future__ import annotations

from collections.abc import Callable

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.core.access import AP_LAYOUT, SPACE, ApWalker, dtype_shift
from hdl.core.engines import (
    DATA_BITS,
    ENGINE_DTYPES,
    GENERATOR_SEED,
    MOVED_BITS,
    OPERAND_DTYPES,
    bitwise,
    engine_ports,
    lane_input,
    lane_output,
    load_operand,
    moved_bytes,
    moved_source,
    operand_refusal,
    pick,
    read_step,
    unit_format,
)
from hdl.core.isa import (
    AP,
    WORD_BITS,
    Activation,
    Instruction,
    TensorCopy,
    TensorCopyDynamic,
    TensorScalar,
    field_positions,
)
from hdl.emitted import module_text
from hdl.vector.activation import Activation as ActivationUnit
from hdl.vector.activation import ActivationParams
from hdl.vector.functions import FunctionSpec
from hdl.vector.lanes import add_lane, cast_module, shared_verilog
from hdl.vector.ops import Reduce, VectorOp
from hdl.vector.vector import Vector, VectorParams

__all__ = ["SCALAR_OPS", "SLICE_MODULE", "ScalarEngine", "ScalarSlice", "supported"]

SCALAR_OPS = (Activation, TensorScalar, TensorCopy, TensorCopyDynamic)
#: The module of one partition's share of the engine (:class:`ScalarSlice`).
SLICE_MODULE = "neuron_core_scalar_slice"


def supported(ins: Instruction, formats: tuple[str, ...] = ENGINE_DTYPES) -> str | None:
    """Why the core's scalar engine, reading and writing the element types ``formats``,
    cannot run ``ins`` (None: it can)."""
    if not isinstance(ins, SCALAR_OPS):
        return f"the scalar engine runs {', '.join(c.__name__ for c in SCALAR_OPS)}"
    if not isinstance(ins, Activation):
        return operand_refusal(ins, formats)
    for name in ("dst", "src"):
        ap: AP = getattr(ins, name)
        if ap.dtype not in formats:
            return f"{name} must be one of {', '.join(formats)}, not {ap.dtype}"
    if ins.bias is not None and ins.bias.dtype not in OPERAND_DTYPES:
        return f"bias must be one of {', '.join(OPERAND_DTYPES)}, not {ins.bias.dtype}"
    if ins.reduce_dst is not None and ins.reduce_dst.dtype not in formats:
        return f"reduce_dst must be one of {', '.join(formats)}, not {ins.reduce_dst.dtype}"
    return None


class ScalarSlice(wiring.Component):
    """One partition's share of a scalar engine of ``partitions`` partitions and ``lanes``
    lanes, the engine's partition ``index``, emitted once as :data:`SLICE_MODULE` and
    instantiated per partition.

    Read side: ``row`` is the partition's element of ``src`` rotated to the tile's first
    partition (``r_rows``: the candidate words ``r_data[(index + k * chunk) % partitions]``,
    ``src_first``, as :func:`~hdl.core.engines.pick` selects), shifted down by its byte
    ``shift``, as the units read an element of the type ``src_dtype``
    (:func:`~hdl.core.engines.lane_input`); ``bias`` and ``scalar1`` are the lane's operands
    (:func:`~hdl.core.engines.load_operand`), registers loaded with ``imm`` / ``imm1``
    (``set_imm``) or with ``r_rows`` rotated to ``bias_first`` / ``s1_first``, shifted down by
    the byte ``bias_shift`` / ``s1_shift`` and widened to fp32 from the type ``bias_dtype`` /
    ``s1_dtype`` (``set_bias`` / ``set_scalar1``). Write side:
    ``w_data`` is partition ``index``'s word of the lanes' results (``y_rows``: the result of
    the lane of partition ``(index - k * chunk) % partitions``, unrotated from ``t_first``),
    as an element of the type ``t_dtype`` (:func:`~hdl.core.engines.lane_output`), placed at
    byte ``w_shift``; ``w_part`` whether the partition is in the group being written:
    from ``t_first + base`` for ``lanes`` partitions, below ``t_first + t_count``.
    ``words``: the instruction is bitwise, its int32 and uint32 elements and operands read
    and written as words.
    """

    def __init__(self, partitions: int, lanes: int):
        self.partitions, self.lanes = partitions, lanes
        self.chunk = min(32, partitions)
        part = AP_LAYOUT.members["partition"]
        rows = In(DATA_BITS * (partitions // self.chunk))
        super().__init__({
            "index": In(range(partitions)), "r_rows": rows, "y_rows": rows,
            "src_dtype": In(AP_LAYOUT.members["dtype"]),
            "t_dtype": In(AP_LAYOUT.members["dtype"]),
            "src_first": In(part), "bias_first": In(part), "bias_shift": In(2),
            "bias_dtype": In(AP_LAYOUT.members["dtype"]), "s1_first": In(part),
            "s1_shift": In(2), "s1_dtype": In(AP_LAYOUT.members["dtype"]), "t_first": In(part),
            "t_count": In(AP_LAYOUT.members["partitions"]), "base": In(range(partitions + lanes)),
            "shift": In(2), "w_shift": In(2), "words": In(1), "set_imm": In(1),
            "set_bias": In(1),
            "set_scalar1": In(1), "imm": In(32), "imm1": In(32), "row": Out(32),
            "bias": Out(32), "scalar1": Out(32), "w_data": Out(32), "w_part": Out(1)})

    def elaborate(self, platform):
        m = Module()
        chunk = self.chunk
        m.d.comb += self.row.eq(lane_input(m, pick(self.r_rows, self.src_first, chunk)
                                           >> (self.shift * 8), self.src_dtype, "src",
                                           self.words))
        for reg, first, shift, dtype, imm, load, name in (
                (self.bias, self.bias_first, self.bias_shift, self.bias_dtype, self.imm,
                 self.set_bias, "operand0"),
                (self.scalar1, self.s1_first, self.s1_shift, self.s1_dtype, self.imm1,
                 self.set_scalar1, "operand1")):
            load_operand(m, reg, self.r_rows, first, shift, dtype, chunk, self.set_imm, imm,
                         load, name, self.words)
        lo = self.t_first + self.base
        m.d.comb += [
            self.w_data.eq(lane_output(m, pick(self.y_rows, self.t_first, chunk), self.t_dtype,
                                       self.words) << (self.w_shift * 8)),
            self.w_part.eq((lo <= self.index) & (self.index < lo + self.lanes)
                           & (self.index < self.t_first + self.t_count))]
        return m


class ScalarEngine(wiring.Component):
    """The scalar engine of a core of ``partitions`` partitions with ``lanes`` activation
    lanes running ``functions`` (stochastic rounding's generator ``rng``); ``words`` is the
    depth of the deeper of SBUF and PSUM in 32-bit words."""

    def __init__(self, partitions: int, lanes: int, words: int,
                 functions: tuple[FunctionSpec, ...], rng: str):
        if not isinstance(lanes, int) or not 1 <= lanes <= partitions:
            raise ValueError(f"lanes must be an integer in 1 .. {partitions}, not {lanes!r}")
        self.partitions, self.lanes = partitions, lanes
        self.params = ActivationParams(lanes=lanes, functions=functions, rng=rng,
                                       seed=GENERATOR_SEED)
        n = partitions
        super().__init__(engine_ports(("r",), n, words))
        self.unit = ActivationUnit(self.params, lane_instances=True)
        # the vector engine's lanes (with its generator where the chip has one)
        self.alu = Vector(VectorParams(lanes=lanes, rng=rng, seed=GENERATOR_SEED),
                          lane_instances=True)

    @property
    def groups(self) -> int:
        """Turns of the lanes that cover every partition."""
        return -(-self.partitions // self.lanes)

    def modules(self, *, alu: bool = True) -> dict[str, Callable[[], str]]:
        """The modules this engine instantiates (:data:`hdl.emitted.Modules`): the
        activation unit's, its vector unit's (without ``alu``: left to an engine whose unit
        has the same lane) and its partition slice."""
        sum_cast = cast_module(self.params.formats, None)  # reduce_dst's, a lane each
        return {**self.unit.modules(), **(self.alu.modules() if alu else {}),
                sum_cast: shared_verilog(self.params.formats, None)[sum_cast],
                SLICE_MODULE: lambda: module_text(ScalarSlice(self.partitions, self.lanes),
                                                  SLICE_MODULE)}

    def elaborate(self, platform):
        m = Module()
        n, lanes = self.partitions, self.lanes
        chunk = min(32, n)
        m.submodules.unit = unit = self.unit
        m.submodules.alu = alu = self.alu
        word = Signal(WORD_BITS)
        opcode = word[:8]

        def field(cls, name):
            pos, bits, kind = field_positions(cls)[name]
            value = word[pos:pos + bits]
            return data.View(AP_LAYOUT, value) if kind == "ap" else value

        # bias: Activation's bias or TensorScalar's operand0 (imm: where it has none)
        dst, src, bias, red = (Signal(AP_LAYOUT, name=nm) for nm in ("dst", "src", "bias", "red"))
        s1 = Signal(AP_LAYOUT, name="s1")
        is_act, op, op1, imm, imm1 = Signal(), Signal(VectorOp), Signal(VectorOp), Signal(32), \
            Signal(32)
        stochastic = Signal()
        # TensorCopyDynamic: the offset's AP (``place``), the source moved by ``moved`` bytes
        # once the offset is read (``placed``)
        place, dynamic, placed = Signal(AP_LAYOUT), Signal(), Signal()
        moved = Signal(signed(MOVED_BITS))
        with m.Switch(opcode):
            with m.Case(Activation.OPCODE):
                m.d.comb += [is_act.eq(1)] + [
                    sig.eq(field(Activation, nm)) for sig, nm in
                    ((dst, "dst"), (src, "src"), (bias, "bias"), (red, "reduce_dst"),
                     (stochastic, "rounding"))]
            with m.Case(TensorScalar.OPCODE):
                m.d.comb += [dst.eq(field(TensorScalar, "dst")),
                             src.eq(field(TensorScalar, "src")),
                             bias.eq(field(TensorScalar, "operand0")),
                             op.eq(field(TensorScalar, "op0")),
                             imm.eq(field(TensorScalar, "imm0")),
                             s1.eq(field(TensorScalar, "operand1")),
                             op1.eq(field(TensorScalar, "op1")),
                             imm1.eq(field(TensorScalar, "imm1")),
                             stochastic.eq(field(TensorScalar, "rounding"))]
            with m.Case(TensorCopy.OPCODE):
                m.d.comb += [dst.eq(field(TensorCopy, "dst")), src.eq(field(TensorCopy, "src")),
                             op.eq(VectorOp.COPY), stochastic.eq(field(TensorCopy, "rounding"))]
            with m.Case(TensorCopyDynamic.OPCODE):
                moved_src, assign = moved_source(field(TensorCopyDynamic, "src"), moved)
                m.d.comb += [*assign, dst.eq(field(TensorCopyDynamic, "dst")),
                             src.eq(moved_src), place.eq(field(TensorCopyDynamic, "offset")),
                             op.eq(VectorOp.COPY), dynamic.eq(1)]
        has_bias, has_red, has_s1 = bias.partitions != 0, red.partitions != 0, s1.partitions != 0

        m.submodules.ws = ws = ApWalker()
        m.submodules.wd = wd = ApWalker()
        start = Signal()
        m.d.comb += [ws.ap.eq(src), wd.ap.eq(dst), ws.start.eq(start), wd.start.eq(start)]

        # group: which turn of the lanes; base: its first partition within the tile
        group = Signal(range(self.groups + 1))
        base = Signal(range(n + lanes))
        # the write side: dst's next element (or reduce_dst's one), in the group's partitions
        reducing = Signal()  # this cycle writes reduce_dst
        reduced = Signal()  # the group's reduce_dst is written
        writing = Signal()
        t_first = Mux(reducing, red.partition, dst.partition)
        t_count = Mux(reducing, red.partitions, dst.partitions)
        t_space = Mux(reducing, red.space, dst.space)
        item = (1 << (1 << dtype_shift(Mux(reducing, red.dtype, dst.dtype)))) - 1
        at = Mux(reducing, red.offset, wd.byte)

        def select(values):
            """The group's ``lanes`` of ``values`` (partitions in tile order)."""
            out = []
            for lane in range(lanes):
                v = values[lane] if lane < n else 0
                for g in range(1, self.groups):
                    at = g * lanes + lane
                    v = Mux(group == g, values[at] if at < n else 0, v)
                out.append(v)
            return out

        formats, alu_formats = self.params.formats, alu.params.formats
        m.d.comb += [unit.func.eq(field(Activation, "func")),
                     unit.in_format.eq(unit_format(formats, src.dtype)),
                     unit.out_format.eq(unit_format(formats, dst.dtype)),
                     unit.stochastic.eq(stochastic),
                     alu.op.eq(op), alu.op1.eq(op1), alu.reduce.eq(Reduce.NONE),
                     alu.use_scalar.eq(opcode == TensorScalar.OPCODE),
                     alu.in_format.eq(unit_format(alu_formats, src.dtype)),
                     alu.out_format.eq(unit_format(alu_formats, dst.dtype)),
                     alu.stochastic.eq(stochastic)]
        # every partition's share (ScalarSlice): its source element and bias, its result
        s1_valid, s1_last, sent, shift = Signal(), Signal(), Signal(), Signal(2)
        set_imm, set_bias, set_scalar1 = Signal(), Signal(), Signal()
        slices = {name: [] for name in ("row", "bias", "scalar1", "w_data", "w_part")}
        ways = [k * chunk for k in range(n // chunk)]
        results = Signal(32 * lanes)  # the lanes' results on the write side (below)
        for p in range(n):
            outputs = {name: Signal(1 if name == "w_part" else 32, name=f"slice{p}_{name}")
                       for name in slices}
            for name, signal in outputs.items():
                slices[name].append(signal)
            y_rows = [results.word_select((p - k) % n % lanes, 32) for k in ways]
            add_lane(m, f"slice{p}", None, SLICE_MODULE, {
                "index": Const(p, range(n)),
                "r_rows": Cat(*[self.r_data[(p + k) % n] for k in ways]),
                "y_rows": Cat(*y_rows), "src_first": src.partition,
                "bias_first": bias.partition, "bias_shift": bias.offset[:2],
                "bias_dtype": bias.dtype, "s1_first": s1.partition,
                "s1_shift": s1.offset[:2], "s1_dtype": s1.dtype, "t_first": t_first,
                "t_count": t_count, "src_dtype": src.dtype,
                "t_dtype": Mux(reducing, red.dtype, dst.dtype),
                "base": base, "shift": shift, "w_shift": at[:2],
                "words": bitwise(op) | bitwise(op1), "set_imm": set_imm,
                "set_bias": set_bias, "set_scalar1": set_scalar1, "imm": imm,
                "imm1": imm1}, outputs)
        lane_bias = Cat(*select(slices["bias"]))
        m.d.comb += [unit.scale.eq(field(Activation, "scale").replicate(lanes)),
                     unit.bias.eq(lane_bias), alu.scalar.eq(lane_bias),
                     alu.scalar1.eq(Cat(*select(slices["scalar1"])))]

        # the read side: src of every partition, the group's lanes one cycle after the address
        lane_in = Cat(*select(slices["row"]))
        m.d.comb += [self.r_addr.eq(ws.byte[2:]), self.r_psum.eq(src.space == SPACE["psum"]),
                     unit.i.valid.eq(s1_valid & is_act), unit.i.payload.last.eq(s1_last),
                     alu.i.valid.eq(s1_valid & ~is_act), alu.i.payload.last.eq(s1_last),
                     unit.i.payload.data.eq(lane_in), alu.i.payload.a.eq(lane_in)]
        # the unit the instruction streams through
        i_ready = Mux(is_act, unit.i.ready, alu.i.ready)
        o_valid, o_ready = Mux(is_act, unit.o.valid, alu.o.valid), Signal()
        m.d.comb += [unit.o.ready.eq(o_ready & is_act), alu.o.ready.eq(o_ready & ~is_act)]

        # reduce_dst's sums cast to its type to nearest even, a lane each (fp32 and the
        # integer types as they are: the slices write those by value)
        red_format = unit_format(formats, red.dtype)
        sums = []
        for lane in range(lanes):
            total, cast = unit.o.payload.sum[lane], Signal(32, name=f"sum_cast{lane}_y")
            add_lane(m, f"sum_cast{lane}", None, cast_module(formats, None),
                     {"x": total, "fmt": red_format}, {"y": cast}, clocked=False)
            sums.append(Mux(red_format == formats.index("fp32"), total, cast))
        m.d.comb += [results.eq(Mux(reducing, Cat(*sums),
                                    Mux(is_act, unit.o.payload.data.as_value(),
                                        alu.o.payload.as_value()))),
                     self.w_addr.eq(at[2:]), self.w_psum.eq(t_space == SPACE["psum"]),
                     self.w_part.eq(Cat(*slices["w_part"])),
                     self.w_be.eq(Mux(writing, item << at[:2], 0)),
                     self.w_data.eq(Cat(*slices["w_data"]))]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.issue):
                    m.d.sync += [word.eq(self.word), placed.eq(0), moved.eq(0)]
                    m.next = "SETUP"
            with m.State("SETUP"):
                m.d.sync += [group.eq(0), base.eq(0)]
                m.d.comb += set_imm.eq(1)
                with m.If(dynamic & ~placed):
                    m.next = "PLACE"
                with m.Elif(has_bias):
                    m.next = "BIAS"
                with m.Elif(has_s1):
                    m.next = "OPERAND1"
                with m.Else():
                    m.next = "GROUP"

            def read_operand(ap):
                """Read the operand's one element per partition (its data next cycle)."""
                m.d.comb += [self.r_addr.eq(ap.offset[2:]), self.r_en.eq(1),
                             self.r_psum.eq(ap.space == SPACE["psum"])]

            with m.State("PLACE"):  # TensorCopyDynamic's offset, then its source's move
                read_operand(place)
                m.next = "PLACE_DATA"
            with m.State("PLACE_DATA"):
                v = Array(self.r_data[p] for p in range(n))[place.partition]
                m.d.sync += [moved.eq(moved_bytes(v, word, src.dtype)), placed.eq(1)]
                m.next = "SETUP"

            with m.State("BIAS"):
                read_operand(bias)
                m.next = "BIAS_DATA"
            with m.State("BIAS_DATA"):
                m.d.comb += set_bias.eq(1)
                with m.If(has_s1):
                    read_operand(s1)
                    m.next = "OPERAND1_DATA"
                with m.Else():
                    m.next = "GROUP"
            with m.State("OPERAND1"):
                read_operand(s1)
                m.next = "OPERAND1_DATA"
            with m.State("OPERAND1_DATA"):
                m.d.comb += set_scalar1.eq(1)
                m.next = "GROUP"
            with m.State("GROUP"):
                m.d.comb += start.eq(1)
                m.d.sync += [sent.eq(0), s1_valid.eq(0), reduced.eq(0)]
                m.next = "STREAM"
            with m.State("STREAM"):
                read_step(m, ~s1_valid | i_ready, self.r_en, ws, sent, s1_valid, s1_last,
                          shift)
                with m.If(is_act & unit.o.valid & unit.o.payload.last & has_red & ~reduced):
                    m.d.comb += [reducing.eq(1), writing.eq(1)]
                    m.d.sync += reduced.eq(1)
                with m.Elif(o_valid):
                    m.d.comb += [o_ready.eq(1), writing.eq(1), wd.step.eq(1)]
                    with m.If(wd.row_last):
                        m.d.sync += [group.eq(group + 1), base.eq(base + lanes)]
                        with m.If(base + lanes >= dst.partitions):
                            m.d.comb += self.done.eq(1)
                            m.next = "IDLE"
                        with m.Else():
                            m.next = "GROUP"
        return m
