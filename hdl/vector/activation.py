"""Scalar (activation) engine: ``out = f(data * scale + bias)`` with a running sum.

Each beat of the input stream carries one fp32 element of every lane (partition) and
``last`` (the element ends a row of the free axis). Per lane:

* ``x = add32(mul32(data, scale), bias)`` with the lane's ``scale`` and ``bias``;
* ``y = f(x)``, ``f = params.functions[func]``: range reduction on the fp32 exponent (exp,
  log, sqrt, rsqrt, reciprocal), exactly modulo pi/2 (sin, cos) or to 1/x (arctan), a
  piecewise polynomial evaluated in fp32 from a coefficient ROM, then the reduction undone
  and the special values and out-of-range rules applied, all as documented in
  :mod:`hdl.vector.functions` (coefficients from :func:`hdl.vector.fitting.activation_table`);
* ``sum = add32(sum, y)``, the running sum along the free axis, from +0.0, restarting after
  the element flagged ``last``.

Every output beat carries ``data`` (``y``), ``sum`` (the running sum including this element)
and ``last``. Pipeline: ``5 + degree`` register stages with a common stall (a beat moves when
the output register is empty or read); one beat per cycle at full rate. Control inputs
(``func``, ``scale``, ``bias``) must hold while a stream is in flight.
The golden model is :mod:`sim.golden.activation`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hdl.emitted import module_text
from hdl.numerics.cast import check_rng, seed_value, seed_words
from hdl.numerics.constants import (
    CANONICAL_NAN32,
    HALF_PI32,
    INF32,
    LN2_32,
    LOG2E32,
    MAGIC32,
    NEG_INF32,
    ONE32,
    SIGN32,
    SQRT2_MANT,
    T_MAX32,
    TWO64_32,
    TWO_OVER_PI32,
    f32_bits,
)

from . import trig
from .convert import ENGINE_FORMATS, check_formats, widen_input
from .fitting import activation_table, exp_index, rom_words
from .fpcmp import f_lt, is_nan
from .functions import DEFAULT_FUNCTIONS, EXP_TAIL_CUBIC, RULE_BITS, TRIG, FunctionSpec
from .lanes import add_cast, add_fp, add_lane, shared_verilog

__all__ = ["Activation", "ActivationLane", "ActivationParams"]


@dataclass(frozen=True, kw_only=True)
class ActivationParams:
    """Parameters of the scalar (activation) engine.

    lanes : partitions processed side by side (the chip's SBUF partitions, 128; scaled down
        for simulation).
    functions : the function set, selected at run time by index (``func``); each entry's
        range, segment count and degree fix its ROM rows (see :mod:`hdl.vector.functions`).
    formats : the input and output formats, selected at run time by index (``in_format``,
        ``out_format``): ``"fp32"`` and float formats of :mod:`hdl.numerics.formats`
        narrower than fp32.
    rng, seed : the per-lane generator of stochastic rounding and its seed
        (:mod:`hdl.numerics.cast`); ``rng`` None: the engine rounds to nearest even only,
        its lanes have no generator and no stochastic datapath, and its ``stochastic``
        control input is ignored.
    """

    lanes: int
    functions: tuple[FunctionSpec, ...] = DEFAULT_FUNCTIONS
    formats: tuple[str, ...] = ENGINE_FORMATS
    rng: str | None = "xorwow"
    seed: int = 0

    def __post_init__(self):
        if not isinstance(self.lanes, int) or isinstance(self.lanes, bool) or self.lanes < 1:
            raise ValueError(f"lanes must be a positive integer, not {self.lanes!r}")
        if (not isinstance(self.functions, tuple) or not self.functions
                or not all(isinstance(f, FunctionSpec) for f in self.functions)):
            raise ValueError("functions must be a non-empty tuple of FunctionSpec, "
                             f"not {self.functions!r}")
        check_formats(self.formats)
        check_rng(self.rng, optional=True)
        if (not isinstance(self.seed, int) or isinstance(self.seed, bool)
                or not 0 <= self.seed < 2**32):
            raise ValueError(f"seed must be an integer in [0, 2**32), not {self.seed!r}")

    def format_index(self, name: str) -> int:
        """The ``in_format`` / ``out_format`` code of the format called ``name``."""
        if name not in self.formats:
            raise ValueError(f"format must be one of {', '.join(self.formats)}, not {name!r}")
        return self.formats.index(name)

    def index(self, name: str) -> int:
        """The ``func`` code of the function called ``name``."""
        names = [f.name for f in self.functions]
        if name not in names:
            raise ValueError(f"name must be one of {', '.join(names)}, not {name!r}")
        return names.index(name)

    @property
    def degree(self) -> int:
        """Horner steps of the pipeline: the largest degree of the set."""
        return rom_words(self.functions)[0]

    @property
    def latency(self) -> int:
        """Register stages from input to output."""
        return 5 + self.degree


def input_layout(lanes: int) -> data.StructLayout:
    return data.StructLayout({"data": data.ArrayLayout(32, lanes), "last": 1})


def output_layout(lanes: int) -> data.StructLayout:
    return data.StructLayout({
        "data": data.ArrayLayout(32, lanes),
        "sum": data.ArrayLayout(32, lanes),
        "last": 1,
    })


def _consts(params: ActivationParams):
    """Per-function control constants, as lists indexed by ``func``; the exp table's
    segment selection (the exp function's, or the tail table of ``below="exp"``) under
    ``"exp_*"``."""
    tables = activation_table(params.functions)
    fields = {k: [] for k in ("log_mode", "exact", "relu", "lo", "hi", "neg_lo", "inv_w", "n",
                              "kb", "e_lo", "base", "post", "is_exp", "is_log", "is_sqrt",
                              "is_rsqrt", "is_recip", "below_exp", "below_x", "below",
                              "above_x", "above", "square", "abs", "cubic", "cubic_a",
                              "cubic_b", "is_trig", "is_sin", "is_cos", "is_atan")}
    for f, table in zip(params.functions, tables, strict=False):
        poly = f.mode != "exact"
        fields["log_mode"].append(int(f.mode == "log"))
        fields["exact"].append(int(not poly))
        fields["relu"].append(int(f.name == "relu"))
        fields["square"].append(int(f.name == "square"))
        fields["abs"].append(int(f.name == "abs"))
        a, b = EXP_TAIL_CUBIC.get(f.name, (0.0, 0.0))
        fields["cubic"].append(int(f.name in EXP_TAIL_CUBIC))
        fields["cubic_a"].append(f32_bits(a))
        fields["cubic_b"].append(f32_bits(b))
        fields["lo"].append(f32_bits(f.lo) if poly else 0)
        fields["hi"].append(f32_bits(f.hi) if poly else 0)
        fields["neg_lo"].append(f32_bits(-f.lo) if poly else 0)
        uni = f.mode == "uniform"
        fields["inv_w"].append(f32_bits(f.segments / (f.hi - f.lo)) if uni else 0)
        fields["n"].append(f.segments if uni else 1)
        fields["kb"].append(f.segments.bit_length() - 1 if f.mode == "log" else 0)
        fields["e_lo"].append(int(round(math.log2(f.lo))) + 127 if f.mode == "log" else 0)
        fields["base"].append(table.base)
        fields["post"].append(int(f.post_mul_x))
        for name in ("exp", "log", "sqrt", "rsqrt"):
            fields[f"is_{name}"].append(int(f.name == name))
        fields["is_recip"].append(int(f.name == "reciprocal"))
        fields["is_trig"].append(int(f.name in TRIG))
        fields["is_sin"].append(int(f.name == "sin"))
        fields["is_cos"].append(int(f.name == "cos"))
        fields["is_atan"].append(int(f.name == "arctan"))
        tail = poly and not f.reduced and f.below == "exp"
        fields["below_exp"].append(int(tail))
        for side in ("below", "above"):
            rule = getattr(f, side)
            fields[f"{side}_x"].append(int(poly and not f.reduced and rule == "x"))
            fields[side].append(RULE_BITS.get(rule, 0) if poly and not f.reduced else 0)
    e = exp_index(params.functions)
    if e is not None:
        spec = tables[e].spec
        fields["exp_base"] = tables[e].base
        fields["exp_inv_w"] = f32_bits(spec.segments / (spec.hi - spec.lo))
        fields["exp_neg_lo"] = f32_bits(-spec.lo)
        fields["exp_n"] = spec.segments
    else:
        fields.update(exp_base=0, exp_inv_w=0, exp_neg_lo=0, exp_n=1)
    return fields


class ActivationLane(wiring.Component):
    """The datapath of one lane, with its own copy of the coefficient ROM.

    ``en`` moves every register stage; ``step`` (with ``en``) says the last Horner stage
    holds a valid element (it enters the running sum), ``first`` that it starts a row.
    ``y`` and ``sum`` are the output registers. ``stochastic`` and ``seed`` are its output
    cast's (:class:`~hdl.numerics.cast.FormatCastLane`); a lane without a generator
    (``params.rng`` None) has neither.

    With ``fp_instances``, every fp32 adder and multiplier whose operands both vary is an
    ``Instance`` of its module (:data:`~hdl.vector.lanes.FP_MODULES`, the vector engine's
    lanes' too), emitted once, instead of a submodule
    elaborated each time (the lane has about twenty; elaborating them is most of the lane's
    emission time). Those with a constant operand stay submodules, so that synthesis folds
    the constant into them. The output cast is then an ``Instance`` of its module as well
    (:func:`~hdl.vector.lanes.cast_module`, the vector engine's lanes' where the casts are
    equal). Both forms are the same circuit.

    Stages: scale and bias; range reduction (:mod:`hdl.vector.functions`); segment selection
    and ROM read; ``u``; one per Horner step; then post-multiplication, scaling by ``2**k``
    (or log's ``e' ln 2`` added), special values and the running sum, into the output
    registers.
    """

    def __init__(self, params: ActivationParams, *, fp_instances: bool = False):
        self.params = params
        self.fp_instances = fp_instances
        super().__init__({
            "en": In(1),
            "func": In(range(len(params.functions))),
            "data": In(32),
            "scale": In(32),
            "bias": In(32),
            "in_format": In(range(max(len(params.formats), 2))),
            "out_format": In(range(max(len(params.formats), 2))),
            **({} if params.rng is None else {"stochastic": In(1),
                                               "seed": In(32 * seed_words(params.rng))}),
            "step": In(1),
            "first": In(1),
            "y": Out(32),
            "sum": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        degree, words = rom_words(p.functions)
        consts = _consts(p)
        en = self.en

        selected = {}

        def sel(name, width=32):
            """The constant ``name`` of the function selected by ``func`` (one mux each)."""
            if (name, width) not in selected:
                value = Signal(width, name=f"sel_{name}")
                m.d.comb += value.eq(Array(Const(v, width) for v in consts[name])[self.func])
                selected[name, width] = value
            return selected[name, width]

        def fp(kind, a, b, name):
            varying = not any(isinstance(Value.cast(v), Const) for v in (a, b))
            return add_fp(m, kind, name, a, b, self.fp_instances and varying)

        def reg(value, name, shape=32):
            r = Signal(shape, name=name)
            with m.If(en):
                m.d.sync += r.eq(value)
            return r

        flag_layout = data.StructLayout({"nan": 1, "zero": 1, "inf": 1, "sign": 1,
                                         "below": 1, "above": 1, "use_exp": 1, "low": 1,
                                         "kc": 1, "neg": 1, "big": 1})
        kshape = signed(10)

        # stage 1: x = widen(data) * scale + bias
        data_in = widen_input(m, p.formats, self.data, self.in_format)
        x1 = reg(fp("add", fp("mul", data_in, self.scale, "mul_scale"), self.bias,
                    "add_bias"), "x1")

        # stage 2: range reduction
        flags = Signal(flag_layout)
        below = f_lt(x1, sel("lo"))
        m.d.comb += [
            flags.nan.eq(is_nan(x1)),
            flags.zero.eq(x1[0:31] == 0),
            flags.inf.eq(x1[0:31] == INF32),
            flags.sign.eq(x1[31]),
            flags.below.eq(below),
            flags.above.eq(~f_lt(x1, sel("hi")) & ~is_nan(x1)),
            flags.use_exp.eq(sel("is_exp", 1) | (sel("below_exp", 1) & below)),
        ]
        # exp: t = x log2(e) (x (a + b x**2) for a cubic tail), clamped; k = round(t) by the
        # magic constant; f = t - k
        cubic = fp("add", sel("cubic_a"), fp("mul", sel("cubic_b"),
                                              fp("mul", x1, x1, "mul_xx"), "mul_cubic_b"),
                   "add_cubic_a")
        # (the same multiplier gives sin's and cos's |x| 2/pi for |x| < 0.5)
        xs = x1 & ~SIGN32
        is_trig = sel("is_trig", 1)
        t = fp("mul", Mux(is_trig, xs, x1),
               Mux(is_trig, TWO_OVER_PI32, Mux(sel("cubic", 1), cubic, LOG2E32)), "mul_log2e")
        low = f_lt(t, Const(T_MAX32 | SIGN32, 32))
        m.d.comb += flags.low.eq(low)
        t_c = Mux(low, T_MAX32 | SIGN32, Mux(f_lt(Const(T_MAX32, 32), t), T_MAX32, t))
        s = fp("add", t_c, Const(MAGIC32, 32), "add_magic")
        k_exp = Signal(kshape)
        m.d.comb += k_exp.eq(s[0:23] - 0x40_0000)
        f = fp("add", t_c, fp("add", s, Const(MAGIC32 | SIGN32, 32), "sub_magic") ^ SIGN32,
               "sub_k")
        # log domain: |x| = 1.mant * 2**e, subnormals scaled by 2**64 first
        sub = (xs[23:31] == 0) & (xs[0:23] != 0)
        xn = Mux(sub, fp("mul", xs, Const(TWO64_32, 32), "mul_two64"), xs)
        e = Signal(kshape)
        m.d.comb += e.eq(xn[23:31] - 127 - Mux(sub, 64, 0))
        mant = xn[0:23]
        half = mant >= SQRT2_MANT
        odd = e[0]
        m_arg = Mux(sel("is_log", 1), Cat(mant, 127 - half, Const(0, 1)),
                    Mux(sel("is_recip", 1), Cat(mant, Const(127, 8), Const(0, 1)),
                        Cat(mant, 127 + odd, Const(0, 1))))
        k_log = Signal(kshape)
        m.d.comb += k_log.eq(Mux(sel("is_log", 1), e + half,
                                 Mux(sel("is_recip", 1), -e,
                                     Mux(sel("is_sqrt", 1), e >> 1, -(e >> 1)))))
        # sin, cos: |x| 2/pi = q + f; arctan: 1/|x| above 1 (elaborated when in the set)
        is_atan = sel("is_atan", 1)
        f_trig = f_atan = Const(0, 32)
        if any(f.name in TRIG for f in p.functions):
            f_trig, kc, neg = _trig_reduce(m, x1, t, sel("is_cos", 1), sel("is_sin", 1))
            m.d.comb += [flags.kc.eq(is_trig & kc), flags.neg.eq(neg)]
        if any(f.name == "arctan" for f in p.functions):
            f_atan, big = _atan_reduce(m, xs)
            m.d.comb += flags.big.eq(big)
        arg = Mux(flags.use_exp, f, Mux(sel("log_mode", 1), m_arg,
                                         Mux(is_trig, f_trig, Mux(is_atan, f_atan, x1))))
        k = Mux(flags.use_exp, k_exp, Mux(sel("log_mode", 1), k_log, 0))
        # sin, cos and arctan multiply the polynomial by the reduced argument: it takes x's place
        x2 = reg(Mux(is_trig | is_atan, arg, x1), "x2")
        arg2 = reg(arg, "arg2")
        k2, f2 = reg(k, "k2", kshape), reg(flags, "f2", flag_layout)

        # stage 3: segment selection, ROM read; log's e' ln 2
        use_exp = f2.use_exp

        def pick(name, width=32):
            return Mux(use_exp, Const(consts[f"exp_{name}"], width), sel(name, width))

        t = fp("mul", fp("add", arg2, pick("neg_lo"), "add_lo"), pick("inv_w"), "mul_inv_w")
        n = pick("n", 17)
        t_exp = t[23:31]
        n_f = Mux(use_exp, Const(f32_bits(float(consts["exp_n"])), 32),
                  Array(Const(f32_bits(float(v)), 32) for v in consts["n"])[self.func])
        ge_one = ~f_lt(t, Const(ONE32, 32)) & ~is_nan(t)
        ge_n = ~f_lt(t, n_f) & ~is_nan(t)
        shifted = (Cat(t[0:23], Const(1, 1)) >> (150 - t_exp).as_unsigned()[:5])[:17]
        i_uni = Mux(ge_n, n - 1, Mux(ge_one, shifted, 0))
        kb = sel("kb", 5)
        octave = (arg2[23:31] - sel("e_lo", 8)).as_unsigned()[:8]
        i_log = (octave << kb)[:24] | (arg2[0:23] >> (23 - kb).as_unsigned()[:5])
        index = Mux(sel("log_mode", 1) & ~use_exp, i_log, i_uni)[:24]
        rows = max(len(words), 1)
        rom = Memory(shape=unsigned(32 * (degree + 2)), depth=rows, init=words or [0])
        m.submodules.rom = rom
        rd = rom.read_port(domain="sync")
        m.d.comb += [rd.en.eq(en),
                     rd.addr.eq(pick("base", 24) + index + Mux(f2.kc, sel("n", 17), 0))]
        k_f = fp("add", (Const(MAGIC32, 32) + k2)[:32], Const(MAGIC32 | SIGN32, 32), "k_float")
        ln = reg(fp("mul", k_f, Const(LN2_32, 32), "mul_ln2"), "ln3")
        x3, arg3 = reg(x2, "x3"), reg(arg2, "arg3")
        k3, f3 = reg(k2, "k3", kshape), reg(f2, "f3", flag_layout)

        # stage 4: u = arg - centre
        word = rd.data
        u = reg(fp("add", arg3, word[0:32] ^ SIGN32, "add_centre"), "u4")
        coeff = [reg(word[32 * (j + 1):32 * (j + 2)], f"c4_{j}") for j in range(degree + 1)]
        x, fl, kk = reg(x3, "x4"), reg(f3, "f4", flag_layout), reg(k3, "k4", kshape)
        ln = reg(ln, "ln4")

        # Horner stages: acc = c_D; acc = acc * u + c_j, j = D-1 .. 0
        acc = coeff[degree]
        for j in range(degree - 1, -1, -1):
            acc = reg(fp("add", fp("mul", acc, u, f"mul_h{j}"), coeff[j], f"add_h{j}"),
                      f"acc{j}")
            coeff = [reg(c, f"c{j}_{i}") for i, c in enumerate(coeff[:j])] + coeff[j:]
            u = reg(u, f"u{j}")
            x, fl = reg(x, f"x_h{j}"), reg(fl, f"f_h{j}", flag_layout)
            kk, ln = reg(kk, f"k_h{j}", kshape), reg(ln, f"ln_h{j}")

        # output stage: post-multiplication, 2**k or e' ln 2, special values, running sum
        fl = flag_layout(fl)
        post = fp("mul", Mux(sel("square", 1), x, acc), x, "mul_post")  # also square's x * x
        poly = Mux(sel("post", 1), post, acc)
        k1 = Mux(kk < -126, -126, Mux(kk > 127, 127, kk))
        k_rest = Signal(kshape)
        m.d.comb += k_rest.eq(kk - k1)
        k2_ = Mux(k_rest < -126, -126, Mux(k_rest > 127, 127, k_rest))

        def pow2(v):
            return Cat(Const(0, 23), (v + 127).as_unsigned()[:8], Const(0, 1))

        scaled = fp("mul", fp("mul", poly, pow2(k1), "mul_k1"), pow2(k2_), "mul_k2")
        # arctan's pi/2 - r A(r) shares log's adder
        added = fp("add", Mux(is_atan, HALF_PI32, ln), Mux(is_atan, post ^ SIGN32, acc), "add_ln")
        reduced = Mux(sel("is_log", 1), added, scaled)
        neg = fl.sign & ~fl.zero
        zero_inf = Cat(Const(0, 31), fl.sign) | INF32
        y_log = Mux(fl.zero, NEG_INF32, Mux(neg, CANONICAL_NAN32,
                                            Mux(fl.inf, INF32, reduced)))
        y_sqrt = Mux(fl.zero, x, Mux(neg, CANONICAL_NAN32, Mux(fl.inf, INF32, reduced)))
        y_rsqrt = Mux(fl.zero, zero_inf, Mux(neg, CANONICAL_NAN32, Mux(fl.inf, 0, reduced)))
        y_recip = Mux(fl.zero, INF32, Mux(fl.inf, 0, reduced)) | Cat(Const(0, 31), fl.sign)
        tail_zero = Mux(sel("post", 1), SIGN32, 0)
        below_v = Mux(sel("below_exp", 1), Mux(fl.low, tail_zero, reduced),
                      Mux(sel("below_x", 1), x, sel("below")))
        above_v = Mux(sel("above_x", 1), x, sel("above"))
        y_plain = Mux(fl.above, above_v, Mux(fl.below, below_v, reduced))
        relu = Mux(f_lt(Const(0, 32), x), x, 0)
        exact = Mux(sel("relu", 1), relu, Mux(sel("square", 1), post,
                                              Mux(sel("abs", 1), x & ~SIGN32, x)))
        y_trig = Mux(fl.inf, CANONICAL_NAN32,
                     Mux(fl.kc, acc, post) ^ Cat(Const(0, 31), fl.neg))
        y_atan = Mux(fl.big, added, post) | Cat(Const(0, 31), fl.sign)
        exact_, exp_, log_, sqrt_, rsqrt_, recip_, trig_ = (
            sel(name, 1) for name in ("exact", "is_exp", "is_log", "is_sqrt", "is_rsqrt",
                                      "is_recip", "is_trig"))  # declared before the If chain
        y = Signal(32)
        with m.If(fl.nan):
            m.d.comb += y.eq(CANONICAL_NAN32)
        with m.Elif(exact_):
            m.d.comb += y.eq(exact)
        with m.Elif(exp_):
            m.d.comb += y.eq(reduced)
        with m.Elif(log_):
            m.d.comb += y.eq(y_log)
        with m.Elif(sqrt_):
            m.d.comb += y.eq(y_sqrt)
        with m.Elif(rsqrt_):
            m.d.comb += y.eq(y_rsqrt)
        with m.Elif(recip_):
            m.d.comb += y.eq(y_recip)
        with m.Elif(trig_):
            m.d.comb += y.eq(y_trig)
        with m.Elif(is_atan):
            m.d.comb += y.eq(y_atan)
        with m.Else():
            m.d.comb += y.eq(y_plain)
        total = fp("add", Mux(self.first, 0, self.sum), y, "add_sum")
        cast_y = Signal(32, name="cast_y")
        cast_in = {"x": y, "fmt": self.out_format}
        if p.rng is not None:
            cast_in.update(stochastic=self.stochastic, en=en & self.step, seed=self.seed)
        add_cast(m, p.formats, p.rng, self.fp_instances, cast_in, cast_y)
        with m.If(en):
            m.d.sync += self.y.eq(cast_y)
            with m.If(self.step):
                m.d.sync += self.sum.eq(total)
        return m


def _trig_reduce(m: Module, x1, t, is_cos, is_sin):
    """sin's and cos's reduction (:mod:`hdl.vector.functions`, :mod:`hdl.vector.trig`):
    ``(|f|, kc, neg)``, the fp32 bits of ``|f|``, whether the cosine kernel applies and
    whether the result is negated. ``t`` is ``mul32(|x|, 2/pi)``, ``|f|`` below 0.5."""
    xs = x1 & ~SIGN32
    field = xs[23:31]
    big_x = field >= 127 + trig.E_MIN
    shift = Mux(field == 255, 0, 127 + trig.E_MAX - field)[:8]
    window = (Const(trig.TWO_OVER_PI_BITS, trig.LAST_BIT) >> shift)[:trig.WINDOW_BITS]
    fb = trig.FRACTION_BITS
    prod = Signal(24 + trig.WINDOW_BITS)
    m.d.comb += prod.eq(Cat(xs[0:23], Const(1, 1)) * window)
    frac = prod[:fb]
    half_t = big_x & frac[fb - 1]
    mag = Signal(fb)
    m.d.comb += mag.eq(Mux(frac[fb - 1], Const(1 << fb, fb + 1) - frac, frac))
    n_mag = Signal(range(fb + 1))  # bit length of mag
    for i in range(fb):
        with m.If(mag[i]):
            m.d.comb += n_mag.eq(i + 1)
    top = (mag << (fb - n_mag).as_unsigned()[:7])[fb - 24:fb]
    f_exact = Mux(n_mag == 0, 0, Cat(top[:23], (n_mag + 126 - fb)[:8], Const(0, 1)))
    quad = Signal(2)
    m.d.comb += quad.eq(Mux(big_x, prod[fb:fb + 2] + frac[fb - 1], 0)[:2] + is_cos)
    neg = quad[1] ^ (~quad[0] & half_t) ^ (x1[31] & is_sin)
    return Mux(big_x, f_exact, t), quad[0], neg


def _atan_reduce(m: Module, xs):
    """arctan's reduction: ``(arg, big)``, ``big`` where ``|x| > 1``, then ``arg = 1/|x|``
    truncated to 24 bits (0 where subnormal), else ``|x|``."""
    field = xs[23:31]
    quotient = Const(1 << 47, 48) // Cat(xs[0:23], Const(1, 1))
    r_field = Signal(signed(10))
    m.d.comb += r_field.eq(254 - field - (xs[0:23] != 0))
    r = Mux(r_field >= 1, Cat(quotient[:23], r_field[:8], Const(0, 1)), 0)
    big = xs > ONE32
    return Mux(big, r, xs), big


class Activation(wiring.Component):
    """The scalar (activation) engine (see the module docstring).

    Ports: ``i``, a stream of :func:`input_layout`; ``o``, a stream of :func:`output_layout`;
    control ``func`` (index into ``params.functions``), ``scale`` and ``bias``
    (``ArrayLayout(32, lanes)``, per partition), ``in_format``, ``out_format`` and
    ``stochastic`` (ignored by an engine without a generator, ``params.rng`` None: the port
    list is the same on every chip, as the instruction's rounding field is).
    """

    LANE_MODULE = "activation_lane"

    def __init__(self, params: ActivationParams, *, lane_instances: bool = False):
        if not isinstance(params, ActivationParams):
            raise ValueError(f"params must be an ActivationParams, not {params!r}")
        self.params = params
        self.lane_instances = lane_instances
        n = params.lanes
        super().__init__({
            "i": In(stream.Signature(input_layout(n))),
            "o": Out(stream.Signature(output_layout(n))),
            "func": In(range(len(params.functions))),
            "scale": In(data.ArrayLayout(32, n)),
            "bias": In(data.ArrayLayout(32, n)),
            "in_format": In(range(max(len(params.formats), 2))),
            "out_format": In(range(max(len(params.formats), 2))),
            "stochastic": In(1),
        })

    def modules(self, shared: bool = True) -> dict[str, Callable[[], str]]:
        """The modules the engine instantiates when its lanes are instances (see
        :mod:`.lanes`; none when they are not), by name (:data:`hdl.emitted.Modules`):
        the lane (with fp32 units and the output cast as instances, see
        :class:`ActivationLane`), then, unless ``shared`` is False, the fp32 adder and
        multiplier and the output cast it instantiates (:func:`.lanes.shared_verilog`)."""
        if not self.lane_instances:
            return {}
        p = self.params
        modules = {self.LANE_MODULE: lambda: module_text(
            ActivationLane(p, fp_instances=True), self.LANE_MODULE)}
        if shared:
            modules |= shared_verilog(p.formats, p.rng)
        return modules

    def elaborate(self, platform):
        m = Module()
        p = self.params
        stages = p.latency
        en = Signal()
        valid = Signal(stages)
        last = Signal(stages)
        first = Signal(init=1)  # the element entering the output stage starts a row
        m.d.comb += [
            en.eq(~valid[-1] | self.o.ready),
            self.i.ready.eq(en),
            self.o.valid.eq(valid[-1]),
            self.o.payload.last.eq(last[-1]),
        ]
        with m.If(en):
            m.d.sync += [
                valid.eq(Cat(self.i.valid, valid[:-1])),
                last.eq(Cat(self.i.payload.last, last[:-1])),
            ]
            with m.If(valid[-2]):
                m.d.sync += first.eq(last[-2])
        module = self.LANE_MODULE if self.lane_instances else None
        for lane in range(p.lanes):
            inputs = {"en": en, "func": self.func, "data": self.i.payload.data[lane],
                      "scale": self.scale[lane], "bias": self.bias[lane],
                      "in_format": self.in_format, "out_format": self.out_format,
                      **({} if p.rng is None else {
                          "stochastic": self.stochastic,
                          "seed": Const(seed_value(p.rng, p.seed, lane),
                                        32 * seed_words(p.rng))}),
                      "step": valid[-2], "first": first}
            outputs = {"y": self.o.payload.data[lane], "sum": self.o.payload.sum[lane]}
            add_lane(m, f"lane{lane}", lambda: ActivationLane(p), module, inputs, outputs)
        return m
