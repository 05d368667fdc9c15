"""Scalar (activation) engine: ``out = f(data * scale + bias)`` with a running sum.

Each beat of the input stream carries one fp32 element of every lane (partition) and
``last`` (the element ends a row of the free axis). Per lane:

* ``x = add32(mul32(data, scale), bias)`` with the lane's ``scale`` and ``bias``;
* ``y = f(x)``, ``f = params.functions[func]``, a piecewise polynomial evaluated in fp32 from
  a coefficient ROM (segment selection, Horner scheme and out-of-range rules as documented in
  :mod:`hdl.vector.functions`; coefficients from :func:`hdl.vector.fitting.activation_table`);
* ``sum = add32(sum, y)``, the running sum along the free axis, from +0.0, restarting after
  the element flagged ``last``.

Every output beat carries ``data`` (``y``), ``sum`` (the running sum including this element)
and ``last``. Pipeline: ``4 + degree`` register stages with a common stall (a beat moves when
the output register is empty or read); one beat per cycle at full rate. Control inputs
(``func``, ``scale``, ``bias``) must hold while a stream is in flight.
The golden model is :mod:`sim.golden.activation`.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hdl.numerics.fpu import FpAdd32, FpMul32

from .fitting import rom_words
from .fpcmp import CANONICAL_NAN32, SIGN32, f_lt, is_nan
from .functions import DEFAULT_FUNCTIONS, RULE_BITS, FunctionSpec
from .lanes import add_lane, lane_verilog

__all__ = ["Activation", "ActivationLane", "ActivationParams"]


def f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


@dataclass(frozen=True, kw_only=True)
class ActivationParams:
    """Parameters of the scalar (activation) engine.

    lanes : partitions processed side by side (the chip's SBUF partitions, 128; scaled down
        for simulation).
    functions : the function set, selected at run time by index (``func``); each entry's
        range, segment count and degree fix its ROM rows (see :mod:`hdl.vector.functions`).
    """

    lanes: int
    functions: tuple[FunctionSpec, ...] = DEFAULT_FUNCTIONS

    def __post_init__(self):
        if not isinstance(self.lanes, int) or isinstance(self.lanes, bool) or self.lanes < 1:
            raise ValueError(f"lanes must be a positive integer, not {self.lanes!r}")
        if (not isinstance(self.functions, tuple) or not self.functions
                or not all(isinstance(f, FunctionSpec) for f in self.functions)):
            raise ValueError("functions must be a non-empty tuple of FunctionSpec, "
                             f"not {self.functions!r}")

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
        return 4 + self.degree


def input_layout(lanes: int) -> data.StructLayout:
    return data.StructLayout({"data": data.ArrayLayout(32, lanes), "last": 1})


def output_layout(lanes: int) -> data.StructLayout:
    return data.StructLayout({
        "data": data.ArrayLayout(32, lanes),
        "sum": data.ArrayLayout(32, lanes),
        "last": 1,
    })


def _consts(params: ActivationParams):
    """Per-function control constants, as lists indexed by ``func``."""
    fields = {k: [] for k in ("log", "exact", "relu", "lo", "hi", "neg_lo", "inv_w", "n",
                              "kb", "e_lo", "base", "post", "odd", "nan_neg",
                              "below_x", "below", "above_x", "above")}
    base = 0
    for f in params.functions:
        poly = f.mode != "exact"
        fields["log"].append(int(f.mode == "log"))
        fields["exact"].append(int(not poly))
        fields["relu"].append(int(f.name == "relu"))
        fields["lo"].append(f32_bits(f.lo) if poly else 0)
        fields["hi"].append(f32_bits(f.hi) if poly else 0)
        fields["neg_lo"].append(f32_bits(-f.lo) if poly else 0)
        uni = f.mode == "uniform"
        fields["inv_w"].append(f32_bits(f.segments / (f.hi - f.lo)) if uni else 0)
        fields["n"].append(f.segments if uni else 1)
        fields["kb"].append(f.segments.bit_length() - 1 if f.mode == "log" else 0)
        fields["e_lo"].append(int(round(math.log2(f.lo))) + 127 if f.mode == "log" else 0)
        fields["base"].append(base)
        fields["post"].append(int(f.post_mul_x))
        fields["odd"].append(int(f.mode == "log" and f.negative == "odd"))
        fields["nan_neg"].append(int(f.mode == "log" and f.negative == "nan"))
        for side in ("below", "above"):
            rule = getattr(f, side)
            fields[f"{side}_x"].append(int(poly and rule == "x"))
            fields[side].append(RULE_BITS.get(rule, 0) if poly else 0)
        base += f.rows
    return fields


class ActivationLane(wiring.Component):
    """The datapath of one lane, with its own copy of the coefficient ROM.

    ``en`` moves every register stage; ``step`` (with ``en``) says the last Horner stage
    holds a valid element (it enters the running sum), ``first`` that it starts a row.
    ``y`` and ``sum`` are the output registers.
    """

    def __init__(self, params: ActivationParams):
        self.params = params
        super().__init__({
            "en": In(1),
            "func": In(range(len(params.functions))),
            "data": In(32),
            "scale": In(32),
            "bias": In(32),
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

        def sel(name, width=32):
            return Array(Const(v, width) for v in consts[name])[self.func]

        def fp(kind, a, b, name):
            unit = FpAdd32() if kind == "add" else FpMul32()
            m.submodules[name] = unit
            m.d.comb += [unit.a.eq(a), unit.b.eq(b)]
            return unit.y

        def reg(value, name, width=32):
            r = Signal(width, name=name)
            with m.If(en):
                m.d.sync += r.eq(value)
            return r

        flag_layout = data.StructLayout({"nan": 1, "below": 1, "above": 1, "flip": 1,
                                         "zero": 1})

        # stage 1: x = data * scale + bias
        x1 = reg(fp("add", fp("mul", self.data, self.scale, "mul_scale"), self.bias,
                    "add_bias"), "x1")

        # stage 2: segment selection, ROM read
        log = sel("log", 1)
        xs = Mux(log, x1 & ~SIGN32, x1)
        t = fp("mul", fp("add", x1, sel("neg_lo"), "add_lo"), sel("inv_w"), "mul_inv_w")
        n = sel("n", 17)
        t_exp = t[23:31]
        n_f = Array(Const(f32_bits(float(v)), 32) for v in consts["n"])[self.func]
        ge_one = ~f_lt(t, Const(0x3F80_0000, 32)) & ~is_nan(t)
        ge_n = ~f_lt(t, n_f) & ~is_nan(t)
        shifted = (Cat(t[0:23], Const(1, 1)) >> (150 - t_exp).as_unsigned()[:5])[:17]
        i_uni = Mux(ge_n, n - 1, Mux(ge_one, shifted, 0))
        kb = sel("kb", 5)
        octave = (xs[23:31] - sel("e_lo", 8)).as_unsigned()[:8]
        i_log = (octave << kb)[:24] | (xs[0:23] >> (23 - kb).as_unsigned()[:5])
        index = Mux(log, i_log, i_uni)[:24]
        rows = max(len(words), 1)
        rom = Memory(shape=unsigned(32 * (degree + 2)), depth=rows,
                     init=words or [0])
        m.submodules.rom = rom
        rd = rom.read_port(domain="sync")
        flags = Signal(flag_layout)
        # out of range the result is a rule, not the polynomial: read row 0 of the function
        # rather than an address past its rows (or past the ROM)
        in_range = ~(flags.nan | flags.below | flags.above)
        m.d.comb += [rd.en.eq(en), rd.addr.eq(sel("base", 24) + Mux(in_range, index, 0))]
        m.d.comb += [
            flags.nan.eq(is_nan(x1)),
            flags.below.eq(f_lt(xs, sel("lo"))),
            flags.above.eq(~f_lt(xs, sel("hi")) & ~is_nan(x1)),
            flags.flip.eq(log & x1[31]),
            flags.zero.eq(xs[0:31] == 0),
        ]
        x2, xs2 = reg(x1, "x2"), reg(xs, "xs2")
        f2 = reg(flags, "f2", 5)

        # stage 3: u = x' - centre
        word = rd.data
        u3 = reg(fp("add", xs2, word[0:32] ^ SIGN32, "add_centre"), "u3")
        coeff = [reg(word[32 * (k + 1):32 * (k + 2)], f"c3_{k}") for k in range(degree + 1)]
        x, xs_, f = reg(x2, "x3"), reg(xs2, "xs3"), reg(f2, "f3", 5)
        u = u3

        # Horner stages: acc = c_D; acc = acc * u + c_k, k = D-1 .. 0
        acc = coeff[degree]
        for k in range(degree - 1, -1, -1):
            acc = reg(fp("add", fp("mul", acc, u, f"mul_h{k}"), coeff[k], f"add_h{k}"),
                      f"acc{k}")
            coeff = [reg(c, f"c{k}_{j}") for j, c in enumerate(coeff[:k])] + coeff[k:]
            u = reg(u, f"u{k}")
            x, xs_, f = reg(x, f"x_h{k}"), reg(xs_, f"xs_h{k}"), reg(f, f"f_h{k}", 5)

        # output stage: post-multiplication, range rules, running sum
        flags = flag_layout(f)
        post = fp("mul", acc, xs_, "mul_post")
        poly = Mux(sel("post", 1), post, acc)
        below_v = Mux(sel("below_x", 1), x, sel("below"))
        above_v = Mux(sel("above_x", 1), x, sel("above"))
        ranged = Mux(flags.below, below_v, Mux(flags.above, above_v, poly))
        keep_x = (flags.below & sel("below_x", 1)) | (flags.above & sel("above_x", 1))
        signed_ = Mux(flags.flip & sel("odd", 1) & ~keep_x, ranged ^ SIGN32, ranged)
        signed_ = Mux(flags.flip & ~flags.zero & sel("nan_neg", 1), CANONICAL_NAN32, signed_)
        relu = Mux(f_lt(Const(0, 32), x), x, 0)
        exact = Mux(sel("relu", 1), relu, x)
        y = Signal(32)
        m.d.comb += y.eq(Mux(flags.nan, CANONICAL_NAN32,
                             Mux(sel("exact", 1), exact, signed_)))
        total = fp("add", Mux(self.first, 0, self.sum), y, "add_sum")
        with m.If(en):
            m.d.sync += self.y.eq(y)
            with m.If(self.step):
                m.d.sync += self.sum.eq(total)
        return m


class Activation(wiring.Component):
    """The scalar (activation) engine (see the module docstring).

    Ports: ``i``, a stream of :func:`input_layout`; ``o``, a stream of :func:`output_layout`;
    control ``func`` (index into ``params.functions``), ``scale`` and ``bias``
    (``ArrayLayout(32, lanes)``, per partition).
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
        })

    def verilog_dependencies(self) -> list[str]:
        """Verilog of the lane module when lanes are instances (see :mod:`.lanes`)."""
        if not self.lane_instances:
            return []
        return [lane_verilog(ActivationLane(self.params), self.LANE_MODULE)]

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
                      "step": valid[-2], "first": first}
            outputs = {"y": self.o.payload.data[lane], "sum": self.o.payload.sum[lane]}
            add_lane(m, f"lane{lane}", lambda: ActivationLane(p), module, inputs, outputs)
        return m
