"""Binary32 arithmetic of the numerics contract: multiply, add, and exact widening.

Combinational components (no clock):

* :class:`FpMul32`: ``y = a * b``, IEEE 754 binary32.
* :class:`FpMulScaled32`: ``y = a * b * 2**e``, rounded once: the block scales of the MX
  formats folded into the product's exponent.
* :class:`FpAdd32`: ``y = a + b``, IEEE 754 binary32.
* :class:`Widen`: ``y`` = the binary32 encoding of ``x``, a bit pattern of any format of
  :mod:`hdl.numerics.formats` (exact: every such format fits in binary32).
* :class:`MultiWiden`: the same for a format chosen at run time by a code, with one
  normaliser shared by the formats that need one; it also widens the elements of the MX
  formats (mxfp8's OCP e4m3, and mxfp4's e2m1, whose every code is finite).

All of them round to nearest, ties to even, keep subnormal inputs and outputs (no flushing),
overflow to a signed infinity, give ``x + (-x) = +0`` and ``(-0) + (-0) = -0``, and output every
NaN as the canonical ``0x7FC00000`` (also ``inf - inf``, ``0 * inf`` and any NaN input).
The golden counterparts are ``mul32``, ``add32`` and ``widen`` in :mod:`sim.golden.numerics`,
and for the scaled product :func:`sim.golden.systolic.matmul_mx`.

:func:`round_pack` is the rounding and packing stage shared with :mod:`hdl.numerics.cast`.
"""


from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .constants import CANONICAL_NAN32
from .formats import FP32, FloatFormat, IntFormat, MxFormat

__all__ = ["FpAdd32", "FpMul32", "FpMulScaled32", "MultiWiden", "MultiWidenParams", "Widen",
           "WidenParams", "lzc", "round_pack"]


def lzc(value):
    """Leading-zero count of ``value`` (a log-depth tree); undefined result for zero."""
    width = len(value)
    padded = 1
    while padded < width:
        padded *= 2
    padded = max(padded, 2)
    bits = Cat(Const(0, padded - width), value)

    def tree(v):
        if len(v) == 2:
            return ~(v[0] | v[1]), ~v[1]
        half = len(v) // 2
        zero_lo, count_lo = tree(v[:half])
        zero_hi, count_hi = tree(v[half:])
        return zero_lo & zero_hi, Cat(Mux(zero_hi, count_lo, count_hi), zero_hi)

    return tree(bits)[1]


def round_pack(m: Module, fmt: FloatFormat, sign, e_lead, sig, sticky=0, rand=None):
    """Round a finite nonzero value into ``fmt`` and return its encoding.

    The value is ``sig * 2**(e_lead - (len(sig) - 1))`` plus, when ``sticky`` is set, a
    nonzero amount below the last bit of ``sig``; ``sig`` must have its top bit set. The
    ``N = len(sig) - 1 - fmt.man_bits`` bits below the kept mantissa (after the extra right
    shift onto the subnormal grid, if any) decide the rounding:

    * ``rand is None``: round to nearest, ties to even (``sticky`` and bits shifted out count).
    * ``rand`` (N bits): stochastic rounding, round up iff ``dropped + rand >= 2**N``, where
      ``dropped`` is the top N bits below the kept mantissa; lower bits are truncated.

    A rounded magnitude above the largest finite value gives infinity (formats with
    infinities) or NaN (``fn`` formats), with ``sign``.
    """
    width = len(sig)
    man = fmt.man_bits
    drop = width - 1 - man
    if drop < 1:
        raise ValueError(f"significand must be wider than {man + 1} bits, not {width}")
    exp = Signal(signed(max(len(e_lead), 12) + 1))
    m.d.comb += exp.eq(e_lead + fmt.bias)
    rsh = Signal(range(width + 1))
    m.d.comb += rsh.eq(Mux(exp >= 1, 0, Mux(exp < 1 - width, width, 1 - exp)))
    shifted = Signal(width)
    m.d.comb += shifted.eq(sig >> rsh)
    lost = (shifted << rsh)[:width] != sig
    kept = shifted[drop:]
    dropped = shifted[:drop]
    if rand is None:
        rest = dropped[:drop - 1].any() if drop > 1 else Const(0, 1)
        up = dropped[drop - 1] & (rest | lost | sticky | kept[0])
    else:
        if len(rand) != drop:
            raise ValueError(f"rand must be {drop} bits wide, not {len(rand)}")
        up = (dropped + rand)[drop]
    base = Mux(exp >= 1, exp - 1, 0)
    mag = Signal(len(exp) + man + 2)
    m.d.comb += mag.eq((base << man) + kept + up)
    overflow_bits = fmt.inf_bits if fmt.has_inf else fmt.nan_bits
    out = Signal(fmt.bits)
    m.d.comb += out.eq(Cat(Mux(mag > fmt.max_finite_bits, overflow_bits,
                               mag[:fmt.bits - 1]), sign))
    return out


def _unpack32(value):
    """Fields and classes of a binary32 bit pattern."""
    exp = value[23:31]
    man = value[:23]
    return {
        "sign": value[31],
        "zero": (exp == 0) & (man == 0),
        "inf": (exp == 0xFF) & (man == 0),
        "nan": (exp == 0xFF) & (man != 0),
        "sig": Cat(man, exp != 0),  # 24 bits, hidden bit on top
        "exp": Mux(exp == 0, 1, exp),  # biased exponent of the sig's top bit
    }


def _multiply(m: Module, a_bits, b_bits, y, e=0):
    """Drive ``y`` with ``a * b * 2**e`` rounded once (``e`` a signed exponent offset)."""
    a, b = _unpack32(a_bits), _unpack32(b_bits)
    sign = a["sign"] ^ b["sign"]
    product = Signal(48)
    m.d.comb += product.eq(a["sig"] * b["sig"])
    shift = lzc(product)
    norm = Signal(48)
    m.d.comb += norm.eq((product << shift)[:48])
    # product * 2**(ea + eb - 46 + e), leading one at bit 47 - shift; |e| < 512 keeps
    # e_lead within 11 bits (at least -298 - 511, at most 255 + 511).
    e_lead = Signal(signed(11))
    m.d.comb += e_lead.eq(a["exp"] + b["exp"] - 254 + 1 - shift + e)
    rounded = round_pack(m, FP32, sign, e_lead, norm)
    with m.If(a["nan"] | b["nan"] | (a["inf"] & b["zero"]) | (a["zero"] & b["inf"])):
        m.d.comb += y.eq(CANONICAL_NAN32)
    with m.Elif(a["inf"] | b["inf"]):
        m.d.comb += y.eq(Cat(Const(FP32.inf_bits, 31), sign))
    with m.Elif(a["zero"] | b["zero"]):
        m.d.comb += y.eq(Cat(Const(0, 31), sign))
    with m.Else():
        m.d.comb += y.eq(rounded)


class FpMul32(wiring.Component):
    """Binary32 multiplier, combinational; ``y = a * b`` (see the module docstring)."""

    a: In(32)
    b: In(32)
    y: Out(32)

    def elaborate(self, platform):
        m = Module()
        _multiply(m, self.a, self.b, self.y)
        return m


class FpMulScaled32(wiring.Component):
    """Binary32 multiplier with an exponent offset, combinational: ``y = a * b * 2**e``,
    the exact value rounded once as :class:`FpMul32` rounds (to a subnormal, zero or
    infinity where it leaves the normal range); ``e`` is a signed integer in
    [-511, 511]. With ``e = 0`` it is :class:`FpMul32`."""

    a: In(32)
    b: In(32)
    e: In(signed(10))
    y: Out(32)

    def elaborate(self, platform):
        m = Module()
        _multiply(m, self.a, self.b, self.y, self.e)
        return m


class FpAdd32(wiring.Component):
    """Binary32 adder, combinational; ``y = a + b`` (see the module docstring)."""

    a: In(32)
    b: In(32)
    y: Out(32)

    GUARD = 3  # guard, round and sticky positions below the 24-bit significand

    def elaborate(self, platform):
        m = Module()
        swap = self.b[:31] > self.a[:31]
        big_bits = Mux(swap, self.b, self.a)
        small_bits = Mux(swap, self.a, self.b)
        big, small = _unpack32(big_bits), _unpack32(small_bits)
        a, b = _unpack32(self.a), _unpack32(self.b)

        width = 24 + self.GUARD
        big_sig = Cat(Const(0, self.GUARD), big["sig"])
        small_sig = Cat(Const(0, self.GUARD), small["sig"])
        diff = Signal(8)
        m.d.comb += diff.eq(big["exp"] - small["exp"])
        dist = Signal(range(width + 1))
        m.d.comb += dist.eq(Mux(diff > width, width, diff))
        aligned = Signal(width)
        m.d.comb += aligned.eq(small_sig >> dist)
        sticky = (aligned << dist)[:width] != small_sig
        small_aligned = Cat(aligned[0] | sticky, aligned[1:])

        total = Signal(width + 1)
        subtract = big["sign"] ^ small["sign"]
        m.d.comb += total.eq(Mux(subtract, big_sig - small_aligned, big_sig + small_aligned))
        shift = lzc(total)
        norm = Signal(width + 1)
        m.d.comb += norm.eq((total << shift)[:width + 1])
        # total * 2**(e_big - 127 - 26), leading one at bit 27 - shift.
        e_lead = Signal(signed(11))
        m.d.comb += e_lead.eq(big["exp"] - 127 + 1 - shift)
        rounded = round_pack(m, FP32, big["sign"], e_lead, norm)

        with m.If(a["nan"] | b["nan"] | (a["inf"] & b["inf"] & (a["sign"] != b["sign"]))):
            m.d.comb += self.y.eq(CANONICAL_NAN32)
        with m.Elif(a["inf"] | b["inf"]):
            m.d.comb += self.y.eq(Mux(a["inf"], self.a, self.b))
        with m.Elif(total == 0):
            m.d.comb += self.y.eq(Cat(Const(0, 31), a["sign"] & b["sign"]))
        with m.Else():
            m.d.comb += self.y.eq(rounded)
        return m


@dataclass(frozen=True, kw_only=True)
class WidenParams:
    """Parameters of :class:`Widen`: ``fmt`` is the source format (any float format of
    :mod:`hdl.numerics.formats`, or ``INT8``)."""

    fmt: FloatFormat | IntFormat

    def __post_init__(self):
        if not isinstance(self.fmt, FloatFormat | IntFormat):
            raise ValueError(f"fmt must be a FloatFormat or IntFormat, not {self.fmt!r}")


class Widen(wiring.Component):
    """Exact conversion of a ``params.fmt`` bit pattern ``x`` to binary32 bits ``y``.

    Float formats: values are kept exactly (subnormals of the source become normals or
    binary32 subnormals), infinities stay infinities, every NaN becomes ``0x7FC00000``.
    Integer formats: the two's-complement value, exactly.
    """

    def __init__(self, params: WidenParams):
        if not isinstance(params, WidenParams):
            raise ValueError(f"params must be a WidenParams, not {params!r}")
        self.params = params
        super().__init__({"x": In(params.fmt.bits), "y": Out(32)})

    def elaborate(self, platform):
        m = Module()
        fmt = self.params.fmt
        x = self.x
        if isinstance(fmt, IntFormat):
            sign = x[-1]
            mag = Signal(fmt.bits)
            m.d.comb += mag.eq(Mux(sign, -x, x))
            self._widen_magnitude(m, sign, mag, fmt.bits - 1)
            return m

        exp = x[fmt.man_bits:fmt.man_bits + fmt.exp_bits]
        man = x[:fmt.man_bits]
        sign = x[-1]
        top = (1 << fmt.exp_bits) - 1
        if fmt.nan == "ieee":
            is_nan = (exp == top) & (man != 0)
            is_inf = (exp == top) & (man == 0)
        else:
            is_nan = (exp == top) & (man == (1 << fmt.man_bits) - 1)
            is_inf = Const(0, 1)
        with m.If(is_nan):
            m.d.comb += self.y.eq(CANONICAL_NAN32)
        with m.Elif(is_inf):
            m.d.comb += self.y.eq(Cat(Const(FP32.inf_bits, 31), sign))
        with m.Elif((exp == 0) & (man == 0)):
            m.d.comb += self.y.eq(Cat(Const(0, 31), sign))
        with m.Else():
            if fmt.exp_bits == 8 and fmt.bias == 127:  # same exponent: bf16, tf32, fp32
                m.d.comb += self.y.eq(Cat(Const(0, 23 - fmt.man_bits), man, exp, sign))
            else:
                sig = Cat(man, exp != 0)
                self._widen_magnitude(m, sign, sig, Mux(exp == 0, 1, exp) - fmt.bias)
        return m

    def _widen_magnitude(self, m, sign, sig, e_top):
        """Drive ``y`` from a nonzero integer significand whose top bit has exponent
        ``e_top`` (zero input -> +0)."""
        shift = lzc(sig)
        width = max(len(sig), 23) + 2  # room so that round_pack never rounds
        norm = Signal(width)
        m.d.comb += norm.eq(Cat(Const(0, width - len(sig)), (sig << shift)[:len(sig)]))
        e_lead = Signal(signed(12))
        m.d.comb += e_lead.eq(e_top - shift)
        packed = round_pack(m, FP32, sign, e_lead, norm)
        with m.If(sig == 0):
            m.d.comb += self.y.eq(0)
        with m.Else():
            m.d.comb += self.y.eq(packed)


@dataclass(frozen=True, kw_only=True)
class MultiWidenParams:
    """Parameters of :class:`MultiWiden`: code ``i`` selects ``formats[i]``, a float format
    of :mod:`hdl.numerics.formats` (an :class:`~hdl.numerics.formats.MxFormat` stands for its
    elements), or None for a code this unit does not serve (its output is then +0);
    ``width`` is the input's width (each format reads its low bits)."""

    formats: tuple[FloatFormat | MxFormat | None, ...]
    width: int

    def __post_init__(self):
        if not isinstance(self.formats, tuple) or not self.formats or not any(self.formats):
            raise ValueError(f"formats must be a non-empty tuple with a float format, "
                             f"not {self.formats!r}")
        for fmt in self.formats:
            if fmt is not None and not isinstance(fmt, FloatFormat | MxFormat):
                raise ValueError(f"formats must hold FloatFormat, MxFormat or None, "
                                 f"not {fmt!r}")
        widest = max(f.bits for f in self.formats if f is not None)
        if not isinstance(self.width, int) or isinstance(self.width, bool) \
                or self.width < widest:
            raise ValueError(f"width must be an integer of at least {widest}, "
                             f"not {self.width!r}")

    @property
    def code_bits(self) -> int:
        return max(1, (len(self.formats) - 1).bit_length())


class MultiWiden(wiring.Component):
    """Exact conversion to binary32 of ``x`` in the format that ``code`` selects.

    Same results as :class:`Widen` of that format (an MX format: of its element codes, the
    values :func:`sim.golden.systolic.mx_values` gives). Formats with binary32's exponent
    (bf16, tf32, fp32) are re-packed as they are; the others (fp16, the fp8 family, MX
    elements) share one normaliser: each format's significand is left-aligned in a common
    width, so that one leading-zero count and one packing serve them all.
    """

    def __init__(self, params: MultiWidenParams):
        if not isinstance(params, MultiWidenParams):
            raise ValueError(f"params must be a MultiWidenParams, not {params!r}")
        self.params = params
        super().__init__({"x": In(params.width), "code": In(params.code_bits), "y": Out(32)})

    def elaborate(self, platform):
        m = Module()
        formats = self.params.formats
        narrow = [f for f in formats if f is not None and not _fp32_exponent(f)]
        sig_bits = max([f.man_bits + 1 for f in narrow], default=2)
        # Each field is a Mux chain over the codes, not a case statement: a case on `code`
        # alone would be a process that Icarus never runs while `code` stays constant.
        fields = {"sign": [], "nan": [], "inf": [], "zero": [], "wide": [], "direct": [],
                  "sig": [], "e_top": []}
        for fmt in formats:
            if fmt is None:
                for name in fields:
                    fields[name].append(int(name == "zero"))
                continue
            x = self.x[:fmt.bits]
            exp = x[fmt.man_bits:fmt.man_bits + fmt.exp_bits]
            man = x[:fmt.man_bits]
            top = (1 << fmt.exp_bits) - 1
            fields["sign"].append(x[-1])
            fields["zero"].append((exp == 0) & (man == 0))
            if fmt.nan == "ieee":
                fields["nan"].append((exp == top) & (man != 0))
                fields["inf"].append((exp == top) & (man == 0))
            elif fmt.nan == "fn":
                fields["nan"].append((exp == top) & (man == (1 << fmt.man_bits) - 1))
                fields["inf"].append(0)
            else:  # every code finite (fp4 e2m1)
                fields["nan"].append(0)
                fields["inf"].append(0)
            wide_fmt = _fp32_exponent(fmt)
            fields["wide"].append(int(wide_fmt))
            fields["direct"].append(Cat(Const(0, 23 - fmt.man_bits), man, exp, x[-1])
                                    if wide_fmt else 0)
            fields["sig"].append(0 if wide_fmt else
                                 Cat(Const(0, sig_bits - 1 - fmt.man_bits), man, exp != 0))
            fields["e_top"].append(0 if wide_fmt else Mux(exp == 0, 1, exp) - fmt.bias)
        shapes = {"direct": 32, "sig": sig_bits, "e_top": signed(12)}
        picked = {}
        for name, values in fields.items():
            value = Const(int(name == "zero"), 1)  # codes past the list: +0
            for code in reversed(range(len(values))):
                value = Mux(self.code == code, values[code], value)
            picked[name] = Signal(shapes.get(name, 1), name=name)
            m.d.comb += picked[name].eq(value)
        sign, nan, inf, zero, wide, direct, sig, e_top = picked.values()
        packed = Const(0, 32)
        if narrow:
            shift = lzc(sig)
            width = max(sig_bits, 23) + 2  # room so that round_pack never rounds
            norm = Signal(width)
            m.d.comb += norm.eq(Cat(Const(0, width - sig_bits), (sig << shift)[:sig_bits]))
            e_lead = Signal(signed(12))
            m.d.comb += e_lead.eq(e_top - shift)
            packed = round_pack(m, FP32, sign, e_lead, norm)
        with m.If(nan):
            m.d.comb += self.y.eq(CANONICAL_NAN32)
        with m.Elif(inf):
            m.d.comb += self.y.eq(Cat(Const(FP32.inf_bits, 31), sign))
        with m.Elif(zero):
            m.d.comb += self.y.eq(Cat(Const(0, 31), sign))
        with m.Elif(wide):
            m.d.comb += self.y.eq(direct)
        with m.Else():
            m.d.comb += self.y.eq(packed)
        return m


def _fp32_exponent(fmt: FloatFormat | MxFormat) -> bool:
    """Whether ``fmt`` has binary32's exponent field (bf16, tf32, fp32): widening re-packs."""
    return fmt.exp_bits == 8 and fmt.bias == 127
