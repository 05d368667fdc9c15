"""Vector engine: one lane per partition, the free axis streamed over time.

Each beat of the input stream carries one element of every lane (partition): ``a``, ``b``
(32-bit lane words) and ``last`` (the element ends a row of the free axis). Per lane:

0. ``a`` is read in the instruction's input format ``in_format``, ``b`` in its own
   ``b_format`` (indices into ``params.formats``: the two may differ), each widened exactly
   to fp32 (:mod:`hdl.vector.convert`; a narrow value in the word's low bits). The lane's
   ``scalar`` is fp32.
1. ``r = op(a, b')`` with ``b'`` = ``b`` or, when ``use_scalar`` is set, the lane's
   ``scalar`` (tensor-scalar); see :class:`~hdl.vector.ops.VectorOp` (fp32 through
   ``FpAdd32``/``FpMul32``: RNE, subnormals kept, NaN canonical). Then, in the same stage,
   the second operation ``r = op1(r, scalar1)`` on the fp32 ``r`` as it is, ``scalar1`` the
   lane's second scalar (fp32); ``op1`` COPY skips it (``r`` unchanged, not even its NaN
   made canonical): a two-operation tensor-scalar at the same rate and latency as one.
   With ``scan`` the stage instead carries a running value ``r`` along each row:
   ``r = op1(op0(a, r_prev), b)`` (``reverse0`` / ``reverse1`` swap each operation's
   operands, both applied whatever they are), ``r_prev`` the lane's ``scalar`` at a row's
   first element and the previous element's ``r`` after it, kept in fp32: one element per
   cycle, as every other operation.
2. ``reduce`` (:class:`~hdl.vector.ops.Reduce`): none (one output beat per input beat), or a
   sum (``add32`` from +0.0, element 0 first) or max (from -inf) along the free axis, one
   output beat per row on the beat flagged ``last``.
3. The result is written in the instruction's output format ``out_format`` (an index into
   ``params.formats``, a narrow value in the low bits of the 32-bit lane word, zero above):
   cast from fp32 with round-to-nearest-even, or stochastic rounding with ``stochastic``
   (:class:`~hdl.numerics.cast.FormatCastLane`, the lane's generator seeded per lane and
   advancing once per output beat whatever the format); ``fp32`` is written unchanged, so
   bitwise results keep every bit. With ``draw`` (:class:`~hdl.vector.ops.Draw`, an engine
   with a generator) the lane writes instead the number in [0, 1) made of its generator's
   word of the beat (:func:`~hdl.numerics.cast.uniform32`), or keeps the result only where
   that number is at least its ``scalar`` (a dropout), +0.0 elsewhere.

With ``lane_instances`` the lane (:class:`VectorLane`, its seed tied per lane) is a module
emitted once and instantiated per lane, and its fp32 adders and multiplier and its output
cast modules of their own that the lane instantiates (:data:`~hdl.vector.lanes.FP_MODULES`,
:func:`~hdl.vector.lanes.cast_module`, shared with the scalar engine's lanes):
:meth:`Vector.modules`.

Control inputs (``op``, ``reduce``, ``use_scalar``, ``scalar``, ``op1``, ``scalar1``,
``scan``, ``reverse0``, ``reverse1``, ``in_format``, ``b_format``, ``out_format``,
``stochastic``, ``draw``) must hold while a stream is in
flight. Pipeline: two register stages with a common stall (a beat moves when the output stage
is empty or read), the cast in front of the second; one beat per cycle at full rate.
The golden model is :mod:`sim.golden.vector`.
"""


from collections.abc import Callable
from dataclasses import dataclass

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.emitted import module_text
from hdl.numerics.cast import check_rng, seed_value, seed_words, uniform32
from hdl.numerics.constants import CANONICAL_NAN32, NEG_INF32, ONE32, SIGN32

from .convert import ENGINE_FORMATS, check_formats, widen_input
from .fpcmp import COMPARISONS, f_lt, f_max, holds, is_nan
from .lanes import add_cast, add_fp, add_lane, shared_verilog
from .ops import Draw, Reduce, VectorOp

__all__ = ["Vector", "VectorLane", "VectorParams"]


@dataclass(frozen=True, kw_only=True)
class VectorParams:
    """Parameters of the vector engine.

    lanes : partitions processed side by side (the chip's SBUF partitions, 128; scaled down
        for simulation).
    formats : the input and output formats, selected at run time by index (``in_format``,
        ``b_format``, ``out_format``): ``"fp32"`` and float formats of
        :mod:`hdl.numerics.formats` narrower than fp32.
    rng, seed : the per-lane generator of stochastic rounding and its seed
        (:mod:`hdl.numerics.cast`); ``rng`` None: the engine rounds to nearest even only,
        its lanes have no generator and no stochastic datapath, and its ``stochastic``
        control input is ignored.
    """

    lanes: int
    rng: str | None = "xorwow"
    seed: int = 0
    formats: tuple[str, ...] = ENGINE_FORMATS

    def __post_init__(self):
        if not isinstance(self.lanes, int) or isinstance(self.lanes, bool) or self.lanes < 1:
            raise ValueError(f"lanes must be a positive integer, not {self.lanes!r}")
        check_formats(self.formats)
        check_rng(self.rng, optional=True)
        if (not isinstance(self.seed, int) or isinstance(self.seed, bool)
                or not 0 <= self.seed < 2**32):
            raise ValueError(f"seed must be an integer in [0, 2**32), not {self.seed!r}")

    def format_index(self, name: str) -> int:
        """The ``in_format`` / ``b_format`` / ``out_format`` code of the format called
        ``name``."""
        if name not in self.formats:
            raise ValueError(f"format must be one of {', '.join(self.formats)}, not {name!r}")
        return self.formats.index(name)


def input_layout(lanes: int) -> data.StructLayout:
    return data.StructLayout({
        "a": data.ArrayLayout(32, lanes),
        "b": data.ArrayLayout(32, lanes),
        "last": 1,
    })


def _element_op(m, op, a, b, instances: bool, suffix: str):
    """``op(a, b)`` on fp32 bit patterns (:class:`~hdl.vector.ops.VectorOp`), combinational:
    its fp32 adder and multiplier are the submodules ``add<suffix>`` and ``mul<suffix>`` of
    ``m`` (instances of their modules with ``instances``, :func:`~.lanes.add_fp`)."""
    added = add_fp(m, "add", f"add{suffix}", a, Mux(op == VectorOp.SUBTRACT, b ^ SIGN32, b),
                   instances)
    product = add_fp(m, "mul", f"mul{suffix}", a, Mux(op == VectorOp.SQUARE, a, b), instances)
    lt, gt = f_lt(a, b), f_lt(b, a)
    unordered = is_nan(a) | is_nan(b)
    a_true, b_true = a[0:31] != 0, b[0:31] != 0
    wide_count = b[5:32] != 0  # a shift by 32 or more
    r = Signal(32, name=f"r{suffix}")
    with m.Switch(op):
        with m.Case(VectorOp.COPY):
            m.d.comb += r.eq(Mux(is_nan(a), CANONICAL_NAN32, a))
        with m.Case(VectorOp.ADD, VectorOp.SUBTRACT):
            m.d.comb += r.eq(added)
        with m.Case(VectorOp.MULTIPLY, VectorOp.SQUARE):
            m.d.comb += r.eq(product)
        with m.Case(VectorOp.MAX):
            m.d.comb += r.eq(Mux(unordered, CANONICAL_NAN32, Mux(lt, b, a)))
        with m.Case(VectorOp.MIN):
            m.d.comb += r.eq(Mux(unordered, CANONICAL_NAN32, Mux(gt, b, a)))
        with m.Case(*COMPARISONS):
            m.d.comb += r.eq(Mux(holds(op, a, b), ONE32, 0))
        with m.Case(VectorOp.BITWISE_AND):
            m.d.comb += r.eq(a & b)
        with m.Case(VectorOp.BITWISE_OR):
            m.d.comb += r.eq(a | b)
        with m.Case(VectorOp.BITWISE_XOR):
            m.d.comb += r.eq(a ^ b)
        with m.Case(VectorOp.ABS):
            m.d.comb += r.eq(Mux(is_nan(a), CANONICAL_NAN32, a & ~SIGN32))
        with m.Case(VectorOp.LOGICAL_AND):
            m.d.comb += r.eq(Mux(a_true & b_true, ONE32, 0))
        with m.Case(VectorOp.LOGICAL_OR):
            m.d.comb += r.eq(Mux(a_true | b_true, ONE32, 0))
        with m.Case(VectorOp.LOGICAL_XOR):
            m.d.comb += r.eq(Mux(a_true ^ b_true, ONE32, 0))
        with m.Case(VectorOp.ABS_MAX):
            m.d.comb += r.eq(Mux(unordered, CANONICAL_NAN32, Mux(a[0:31] > b[0:31], a, b)))
        with m.Case(VectorOp.ABS_MIN):
            m.d.comb += r.eq(Mux(unordered, CANONICAL_NAN32, Mux(a[0:31] < b[0:31], a, b)))
        with m.Case(VectorOp.LEFT_SHIFT):
            m.d.comb += r.eq(Mux(wide_count, 0, (a << b[0:5])[0:32]))
        with m.Case(VectorOp.RIGHT_SHIFT):
            m.d.comb += r.eq(Mux(wide_count, 0, a >> b[0:5]))
    return r


class VectorLane(wiring.Component):
    """The datapath of one lane: input widening, the element operations, the reduction and
    the output cast.

    ``en`` moves the pipeline (both stages load); ``step`` (with ``en``) says the stage-1 value
    is a valid element to reduce, ``first`` that it starts a row, ``last`` that it ends one.
    ``a`` is a lane word in ``formats[in_format]``, ``b`` one in ``formats[b_format]``,
    ``scalar`` fp32, taken for ``b`` with ``use_scalar``; ``op1`` the second operation on the
    first's result and ``scalar1`` (fp32; COPY: none). With ``scan`` the lane scans instead
    (see the module docstring): ``start`` says the input element (``take``, with ``en``: it
    enters stage 1) begins a row, whose running value starts from ``scalar``; the running
    value is the lane's register ``carry``. ``y`` is the stage-2 register: the
    element result, or the row's reduction, in ``formats[out_format]`` (``stochastic``:
    stochastic rounding by the generator whose initial state is ``seed``, see
    :func:`~hdl.numerics.cast.seed_value`), or what ``draw`` makes of the generator's word
    of the beat (:class:`~hdl.vector.ops.Draw`). With ``rng`` None the lane rounds to
    nearest even only and has neither ``stochastic``, ``draw`` nor ``seed``. With
    ``instances`` the fp32 adders (``add`` and the second operation's ``add1``, the
    reduction's ``red``) and multipliers
    (``mul``, ``mul1``) and the output cast are
    ``Instance`` s of their modules (:data:`~hdl.vector.lanes.FP_MODULES`,
    :func:`~hdl.vector.lanes.cast_module`), emitted once, instead of submodules: the same
    circuit.
    """

    def __init__(self, formats: tuple[str, ...] = ENGINE_FORMATS, rng: str | None = "xorwow",
                 *, instances: bool = False):
        check_formats(formats)
        check_rng(rng, optional=True)
        self.formats = formats
        self.rng = rng
        self.instances = instances
        rounding = {} if rng is None else {"stochastic": In(1), "draw": In(Draw),
                                           "seed": In(32 * seed_words(rng))}
        super().__init__({
            "en": In(1),
            "op": In(VectorOp),
            "reduce": In(Reduce),
            "in_format": In(range(max(len(formats), 2))),
            "b_format": In(range(max(len(formats), 2))),
            "out_format": In(range(max(len(formats), 2))),
            **rounding,
            "a": In(32),
            "b": In(32),
            "use_scalar": In(1),
            "scalar": In(32),
            "op1": In(VectorOp),
            "scalar1": In(32),
            "scan": In(1),
            "reverse0": In(1),
            "reverse1": In(1),
            "take": In(1),
            "start": In(1),
            "step": In(1),
            "first": In(1),
            "last": In(1),
            "y": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        a = widen_input(m, self.formats, self.a, self.in_format, prefix="a")
        b = widen_input(m, self.formats, self.b, self.b_format, prefix="b")
        carry = Signal(32)
        prev = Mux(self.start, self.scalar, carry)
        first_op = _element_op(m, self.op, Mux(self.scan & self.reverse0, prev, a),
                               Mux(self.scan, Mux(self.reverse0, a, prev),
                                   Mux(self.use_scalar, self.scalar, b)), self.instances, "")
        second = _element_op(m, self.op1, Mux(self.scan & self.reverse1, b, first_op),
                             Mux(self.scan, Mux(self.reverse1, first_op, b), self.scalar1),
                             self.instances, "1")
        r = Mux((self.op1 == VectorOp.COPY) & ~self.scan, first_op, second)
        with m.If(self.en & self.take):
            m.d.sync += carry.eq(r)

        s1 = Signal(32)
        acc = Signal(32)
        with m.If(self.en):
            m.d.sync += s1.eq(r)

        is_sum = self.reduce == Reduce.SUM
        acc_in = Mux(self.first, Mux(is_sum, 0, NEG_INF32), acc)
        total = add_fp(m, "add", "red", acc_in, s1, self.instances)
        nxt = Mux(is_sum, total, f_max(acc_in, s1))
        plain = self.reduce == Reduce.NONE
        result = Mux(plain, s1, nxt)
        fp32 = self.out_format == self.formats.index("fp32") if "fp32" in self.formats else 0
        cast_y = Signal(32, name="cast_y")
        cast_in = {"x": result, "fmt": self.out_format}
        word = None
        if self.rng is not None:
            # the draws (Draw) from the generator's word of this beat
            word = Signal(32, name="draw_word")
            uniform = Signal(32, name="draw_uniform")
            m.d.comb += uniform.eq(uniform32(m, word))
            kept = holds(VectorOp.GREATER_EQUAL, uniform, self.scalar)
            drawn = Signal(32, name="drawn")
            m.d.comb += drawn.eq(Mux(self.draw == Draw.UNIFORM, uniform,
                                     Mux((self.draw == Draw.DROPOUT) & ~kept, 0, result)))
            result = drawn
            cast_in.update(x=result, stochastic=self.stochastic, seed=self.seed,
                           en=self.en & self.step & (plain | self.last))
        add_cast(m, self.formats, self.rng, self.instances, cast_in, cast_y, word)
        out = Mux(fp32, result, cast_y)
        with m.If(self.en):
            with m.If(plain):
                m.d.sync += self.y.eq(out)
            with m.Elif(self.step):
                m.d.sync += acc.eq(nxt)
                with m.If(self.last):
                    m.d.sync += self.y.eq(out)
        return m


class Vector(wiring.Component):
    """The vector engine (see the module docstring).

    Ports: ``i``, a stream of :func:`input_layout`; ``o``, a stream of
    ``ArrayLayout(32, lanes)`` (lane words in the output format); control ``op``, ``reduce``,
    ``use_scalar``, ``scalar`` (``ArrayLayout(32, lanes)``, one scalar per partition),
    ``op1`` and ``scalar1`` (the second operation and its scalars, laid out as ``scalar``),
    ``scan``, ``reverse0`` and ``reverse1`` (a scan, ``scalar`` its initial value),
    ``in_format`` (``a``'s), ``b_format`` (``b``'s), ``out_format`` (indices into
    ``params.formats``), ``stochastic`` and ``draw``
    (ignored by an engine without a generator, ``params.rng`` None: the port list is the
    same on every chip, as the instruction's rounding field is, so one bench drives all).
    """

    LANE_MODULE = "vector_lane"

    def __init__(self, params: VectorParams, *, lane_instances: bool = False):
        if not isinstance(params, VectorParams):
            raise ValueError(f"params must be a VectorParams, not {params!r}")
        self.params = params
        self.lane_instances = lane_instances
        n = params.lanes
        super().__init__({
            "i": In(stream.Signature(input_layout(n))),
            "o": Out(stream.Signature(data.ArrayLayout(32, n))),
            "op": In(VectorOp),
            "reduce": In(Reduce),
            "use_scalar": In(1),
            "scalar": In(data.ArrayLayout(32, n)),
            "op1": In(VectorOp),
            "scalar1": In(data.ArrayLayout(32, n)),
            "scan": In(1),
            "reverse0": In(1),
            "reverse1": In(1),
            "in_format": In(range(max(len(params.formats), 2))),
            "b_format": In(range(max(len(params.formats), 2))),
            "out_format": In(range(max(len(params.formats), 2))),
            "stochastic": In(1),
            "draw": In(Draw),
        })

    def modules(self, shared: bool = True) -> dict[str, Callable[[], str]]:
        """The modules the engine instantiates when its lanes are instances (see
        :mod:`.lanes`; none when they are not), by name (:data:`hdl.emitted.Modules`):
        the lane (its seed tied per lane), then, unless ``shared`` is False, the fp32
        adder and multiplier and the output cast it instantiates (:func:`.lanes.shared_verilog`)."""
        if not self.lane_instances:
            return {}
        p = self.params
        modules = {self.LANE_MODULE: lambda: module_text(
            VectorLane(p.formats, p.rng, instances=True), self.LANE_MODULE)}
        if shared:
            modules |= shared_verilog(p.formats, p.rng)
        return modules

    def elaborate(self, platform):
        m = Module()
        p = self.params

        s1_valid = Signal()
        s1_last = Signal()
        s1_first = Signal(init=1)  # the stage-1 element starts a row
        first = Signal(init=1)  # the next accepted element starts a row
        s2_valid = Signal()
        en = Signal()
        m.d.comb += [
            en.eq(~s2_valid | self.o.ready),
            self.i.ready.eq(en),
            self.o.valid.eq(s2_valid),
        ]
        reducing = self.reduce != Reduce.NONE
        with m.If(en):
            m.d.sync += [
                s1_valid.eq(self.i.valid),
                s1_last.eq(self.i.payload.last),
                s1_first.eq(first),
                s2_valid.eq(s1_valid & (~reducing | s1_last)),
            ]
            with m.If(self.i.valid):
                m.d.sync += first.eq(self.i.payload.last)

        module = self.LANE_MODULE if self.lane_instances else None
        for lane in range(p.lanes):
            rounding = {} if p.rng is None else {
                "stochastic": self.stochastic, "draw": self.draw,
                "seed": Const(seed_value(p.rng, p.seed, lane), 32 * seed_words(p.rng))}
            inputs = {"en": en, "op": self.op, "reduce": self.reduce,
                      "in_format": self.in_format, "b_format": self.b_format,
                      "out_format": self.out_format, **rounding,
                      "a": self.i.payload.a[lane],
                      "b": self.i.payload.b[lane], "use_scalar": self.use_scalar,
                      "scalar": self.scalar[lane], "op1": self.op1,
                      "scalar1": self.scalar1[lane], "scan": self.scan,
                      "reverse0": self.reverse0, "reverse1": self.reverse1,
                      "take": self.i.valid, "start": first, "step": s1_valid,
                      "first": s1_first,
                      "last": s1_last}
            add_lane(m, f"lane{lane}", lambda: VectorLane(p.formats, p.rng), module, inputs,
                     {"y": self.o.payload[lane]})
        return m
