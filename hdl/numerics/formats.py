"""Number formats of the numerics contract, described once for the RTL and the golden model.

A :class:`FloatFormat` names a binary floating-point layout (sign, exponent, mantissa), its
exponent bias and how it spends the all-ones exponent:

* ``nan="ieee"``: IEEE 754 style. All-ones exponent with zero mantissa is infinity, with a
  nonzero mantissa NaN. The largest finite value has exponent field ``2**exp_bits - 2``.
* ``nan="fn"``: OCP "fn" style (finite, NaN). Only all-ones exponent *and* all-ones mantissa
  is NaN; there are no infinities, so the all-ones exponent holds finite values too.

:class:`IntFormat` describes the integer format (int8 inputs, int32 wrapping accumulation).

Every float format here widens exactly into binary32; :func:`cfp8` refuses a bias that
would break that. :func:`format_by_name` looks a format up by the names of :data:`FORMATS`
and of the configurable ``cfp8_e4m3_b<bias>`` / ``cfp8_e5m2_b<bias>`` family;
:func:`input_format_by_name` also knows the block-scaled :data:`MX_FORMATS`, which only the
tensor engine takes as input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

__all__ = [
    "BF16",
    "E8M0_BIAS",
    "FORMATS",
    "FP8_E4M3",
    "FP8_E4M3FN",
    "FP8_E5M2",
    "FP16",
    "FP32",
    "INT8",
    "MX_FORMATS",
    "MXFP4",
    "MXFP8",
    "MXFP8_E5M2",
    "NAN_STYLES",
    "TF32",
    "FloatFormat",
    "IntFormat",
    "MxFormat",
    "cfp8",
    "format_by_name",
    "format_table",
    "input_format_by_name",
]

NAN_STYLES = ("ieee", "fn")


def _check_int(field: str, value, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValueError(f"{field} must be an integer in [{lo}, {hi}], not {value!r}")


class _FloatLayout:
    """The layout and range of a small binary float of ``exp_bits``, ``man_bits``, ``bias``
    and NaN style ``nan``: shared by :class:`FloatFormat` and the elements of
    :class:`MxFormat` (whose scale is separate)."""

    exp_bits: int
    man_bits: int
    bias: int
    nan: str

    # -- layout ---------------------------------------------------------------------------
    @property
    def bits(self) -> int:
        """Total width of an encoding."""
        return 1 + self.exp_bits + self.man_bits

    @property
    def max_exp_field(self) -> int:
        """Largest exponent field of a finite value."""
        top = (1 << self.exp_bits) - 1
        return top - 1 if self.nan == "ieee" else top

    @property
    def emax(self) -> int:
        """Unbiased exponent of the largest finite value."""
        return self.max_exp_field - self.bias

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal value."""
        return 1 - self.bias

    @property
    def max_finite_bits(self) -> int:
        """Encoding of the largest finite positive value."""
        man = (1 << self.man_bits) - 1
        if self.nan == "fn":
            man -= 1
        return (self.max_exp_field << self.man_bits) | man

    @property
    def inf_bits(self) -> int | None:
        """Encoding of +infinity, or None for formats without infinities (NaN style not
        ``"ieee"``)."""
        if self.nan != "ieee":
            return None
        return ((1 << self.exp_bits) - 1) << self.man_bits

    @property
    def nan_bits(self) -> int | None:
        """Canonical (positive, quiet) NaN: top mantissa bit set (ieee) or all ones (fn);
        None for a format without NaN (``"none"``)."""
        exp = ((1 << self.exp_bits) - 1) << self.man_bits
        if self.nan == "fn":
            return exp | ((1 << self.man_bits) - 1)
        if self.nan == "ieee":
            return exp | (1 << (self.man_bits - 1))
        return None

    # -- values ---------------------------------------------------------------------------
    @property
    def max_finite(self) -> float:
        mant = self.max_finite_bits & ((1 << self.man_bits) - 1)
        return (1 + mant / 2**self.man_bits) * 2.0**self.emax

    @property
    def min_normal(self) -> float:
        return 2.0**self.emin

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.man_bits)

    @property
    def is_float(self) -> bool:
        return True


@dataclass(frozen=True, kw_only=True)
class FloatFormat(_FloatLayout):
    """A binary floating-point format.

    Parameters
    ----------
    name : str
        Name used in specs and tables (``"bf16"``, ``"fp8_e4m3fn"``, ...).
    exp_bits, man_bits : int
        Widths of the exponent and the stored mantissa (fraction) fields.
    bias : int
        Exponent bias: a normal number is ``(-1)**s * 2**(E - bias) * 1.m``.
    has_inf : bool
        Whether the format encodes infinities (``nan="ieee"`` only).
    nan : str
        NaN encoding, one of :data:`NAN_STYLES` (see the module docstring).
    """

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    has_inf: bool
    nan: str

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, not {self.name!r}")
        _check_int("exp_bits", self.exp_bits, 2, 8)
        _check_int("man_bits", self.man_bits, 1, 23)
        _check_int("bias", self.bias, -(2**10), 2**10)
        if self.nan not in NAN_STYLES:
            raise ValueError(f"nan must be one of {', '.join(map(repr, NAN_STYLES))}, "
                             f"not {self.nan!r}")
        if self.has_inf != (self.nan == "ieee"):
            raise ValueError(f"has_inf must be {self.nan == 'ieee'} for NaN style "
                             f"{self.nan!r}, not {self.has_inf!r}")
        if self.nan == "fn" and self.exp_bits == 1:
            raise ValueError(f"exp_bits must be at least 2 for NaN style 'fn', "
                             f"not {self.exp_bits!r}")
        # Exact widening into binary32: the largest exponent and the finest quantum must fit.
        if self.emax > 127:
            raise ValueError(f"bias must be at least {self.max_exp_field - 127} for "
                             f"{self.exp_bits} exponent bits (largest exponent at most 127 "
                             f"so the format widens exactly to fp32), not {self.bias!r}")
        if self.emin - self.man_bits < -149:
            raise ValueError(f"bias must be at most {149 + 1 - self.man_bits} for "
                             f"{self.man_bits} mantissa bits (smallest subnormal at least "
                             f"2**-149 so the format widens exactly to fp32), not {self.bias!r}")



@dataclass(frozen=True, kw_only=True)
class IntFormat:
    """A two's-complement integer input format with its (wrapping) accumulator width."""

    name: str
    bits: int
    acc_bits: int

    def __post_init__(self):
        _check_int("bits", self.bits, 2, 32)
        _check_int("acc_bits", self.acc_bits, self.bits, 64)

    @property
    def max_finite(self) -> int:
        return (1 << (self.bits - 1)) - 1

    @property
    def min_value(self) -> int:
        return -(1 << (self.bits - 1))

    @property
    def is_float(self) -> bool:
        return False


FP8_E4M3 = FloatFormat(name="fp8_e4m3", exp_bits=4, man_bits=3, bias=7, has_inf=True,
                       nan="ieee")
FP8_E4M3FN = FloatFormat(name="fp8_e4m3fn", exp_bits=4, man_bits=3, bias=7, has_inf=False,
                         nan="fn")
FP8_E5M2 = FloatFormat(name="fp8_e5m2", exp_bits=5, man_bits=2, bias=15, has_inf=True,
                       nan="ieee")
BF16 = FloatFormat(name="bf16", exp_bits=8, man_bits=7, bias=127, has_inf=True, nan="ieee")
FP16 = FloatFormat(name="fp16", exp_bits=5, man_bits=10, bias=15, has_inf=True, nan="ieee")
TF32 = FloatFormat(name="tf32", exp_bits=8, man_bits=10, bias=127, has_inf=True, nan="ieee")
FP32 = FloatFormat(name="fp32", exp_bits=8, man_bits=23, bias=127, has_inf=True, nan="ieee")
INT8 = IntFormat(name="int8", bits=8, acc_bits=32)

FORMATS: dict[str, FloatFormat | IntFormat] = {
    f.name: f for f in (FP8_E4M3, FP8_E4M3FN, FP8_E5M2, BF16, FP16, TF32, FP32, INT8)
}



@dataclass(frozen=True, kw_only=True)
class MxFormat(_FloatLayout):
    """A block-scaled format of the OCP Microscaling (MX) specification v1.0.

    ``block`` consecutive elements along the contraction share one scale, an E8M0 code ``s``
    worth ``2**(s - 127)`` (``s = 255`` is NaN; there is no zero or sign). An element is a
    small float of ``exp_bits``, ``man_bits`` and ``bias``, with NaN style ``nan``: ``"fn"``
    (all-ones exponent and mantissa is NaN, no infinities), ``"ieee"``, or ``"none"`` (every
    code finite, as FP4 E2M1).
    """

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    nan: str
    block: int = 32

    def __post_init__(self):
        _check_int("exp_bits", self.exp_bits, 1, 8)
        _check_int("man_bits", self.man_bits, 1, 23)
        _check_int("block", self.block, 1, 1 << 16)
        if self.nan not in (*NAN_STYLES, "none"):
            raise ValueError(f"nan must be one of 'ieee', 'fn', 'none', not {self.nan!r}")

    def shared_exponents(self, amax, headroom: int = 0) -> np.ndarray:
        """The exponents blocks of largest finite magnitudes ``amax`` share: OCP MX v1.0's
        ``floor(log2(amax)) - emax`` (section 6.3) plus ``headroom`` (1: twice the scale, as
        NKI's ``quantize_mx``), ``-E8M0_BIAS`` for a block of zeros, within
        ``-E8M0_BIAS .. E8M0_BIAS``; the E8M0 code is the exponent plus :data:`E8M0_BIAS`."""
        amax = np.asarray(amax, dtype=np.float64)
        with np.errstate(divide="ignore"):
            e = np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - self.emax + headroom
        e = np.where(amax > 0, e, -E8M0_BIAS)
        return np.clip(e, -E8M0_BIAS, E8M0_BIAS).astype(np.int64)


#: The bias of an MX scale's E8M0 code (``2**(s - 127)``).
E8M0_BIAS = 127
#: MXFP8 with E4M3 elements (OCP E4M3: NaN at S.1111.111, no infinities).
MXFP8 = MxFormat(name="mxfp8", exp_bits=4, man_bits=3, bias=7, nan="fn")
#: MXFP8 with E5M2 elements (OCP E5M2: IEEE infinities and NaNs), NKI's ``float8_e5m2_x4``
#: on Trainium3 [NKI4, NKI-MX].
MXFP8_E5M2 = MxFormat(name="mxfp8_e5m2", exp_bits=5, man_bits=2, bias=15, nan="ieee")
#: MXFP4: E2M1 elements, every code finite (largest 6).
MXFP4 = MxFormat(name="mxfp4", exp_bits=2, man_bits=1, bias=1, nan="none")
MX_FORMATS: dict[str, MxFormat] = {f.name: f for f in (MXFP8, MXFP8_E5M2, MXFP4)}

_CFP8_LAYOUTS = {"e4m3": FP8_E4M3, "e5m2": FP8_E5M2}
_CFP8_NAME = re.compile(r"cfp8_(e4m3|e5m2)_b(-?\d+)")


def cfp8(bias: int, layout: str = "e4m3") -> FloatFormat:
    """Configurable FP8: the e4m3 or e5m2 layout (IEEE-style NaN and infinities, like
    ``fp8_e4m3`` and ``fp8_e5m2``) with an exponent bias set by the spec."""
    if layout not in _CFP8_LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, _CFP8_LAYOUTS))}, "
                         f"not {layout!r}")
    base = _CFP8_LAYOUTS[layout]
    _check_int("bias", bias, -(2**10), 2**10)
    return FloatFormat(name=f"cfp8_{layout}_b{bias}", exp_bits=base.exp_bits,
                       man_bits=base.man_bits, bias=bias, has_inf=base.has_inf, nan=base.nan)


def format_by_name(name: str) -> FloatFormat | IntFormat:
    """The format called ``name``; the error lists the legal names."""
    if isinstance(name, str):
        if name in FORMATS:
            return FORMATS[name]
        match = _CFP8_NAME.fullmatch(name)
        if match:
            return cfp8(int(match.group(2)), match.group(1))
    legal = ", ".join([*FORMATS, "cfp8_e4m3_b<bias>", "cfp8_e5m2_b<bias>"])
    raise ValueError(f"format must be one of {legal}, not {name!r}")


def input_format_by_name(name: str) -> FloatFormat | IntFormat | MxFormat:
    """The tensor-engine input format called ``name``: a name of :func:`format_by_name` or
    of :data:`MX_FORMATS`; the error lists the legal names."""
    if isinstance(name, str) and name in MX_FORMATS:
        return MX_FORMATS[name]
    try:
        return format_by_name(name)
    except ValueError as err:
        raise ValueError(f"{str(err).split(', not ')[0]}, {', '.join(MX_FORMATS)}, "
                         f"not {name!r}") from None


def format_table(formats) -> list[dict]:
    """One row per format for the datasheet, every figure computed from the descriptor.

    ``formats`` holds format objects or names (:func:`input_format_by_name`); an MX format's
    figures are those of its elements, its scale noted with the NaN encoding. Keys: name,
    bits, exponent_bits, mantissa_bits, bias, max_finite, min_normal, min_subnormal,
    infinities, nan_encoding.
    Integer formats give their range in max_finite / min_normal (the minimum value) and None
    where a float-only figure does not apply.
    """
    rows = []
    for fmt in formats:
        fmt = input_format_by_name(fmt) if isinstance(fmt, str) else fmt
        if isinstance(fmt, IntFormat):
            rows.append({
                "name": fmt.name, "bits": fmt.bits, "exponent_bits": None,
                "mantissa_bits": None, "bias": None, "max_finite": fmt.max_finite,
                "min_normal": None, "min_subnormal": None, "infinities": False,
                "nan_encoding": f"none (two's complement, int{fmt.acc_bits} wrapping "
                                f"accumulation)",
            })
            continue
        if not isinstance(fmt, FloatFormat | MxFormat):
            raise ValueError(f"format must be a FloatFormat, IntFormat, MxFormat or name, "
                             f"not {fmt!r}")
        nan = {"ieee": "exponent all ones, mantissa nonzero",
               "fn": "exponent and mantissa all ones", "none": "none"}[fmt.nan]
        if isinstance(fmt, MxFormat):
            nan = f"{nan}; E8M0 scale per {fmt.block} elements, 255 is NaN"
        rows.append({
            "name": fmt.name, "bits": fmt.bits, "exponent_bits": fmt.exp_bits,
            "mantissa_bits": fmt.man_bits, "bias": fmt.bias, "max_finite": fmt.max_finite,
            "min_normal": fmt.min_normal, "min_subnormal": fmt.min_subnormal,
            "infinities": fmt.nan == "ieee", "nan_encoding": nan,
        })
    return rows
