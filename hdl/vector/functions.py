"""Descriptors of the scalar (activation) engine's functions.

A :class:`FunctionSpec` says how one function is approximated: the input range, how that
range is split into segments, the polynomial degree, and what happens outside the range.
The coefficients themselves are computed from it by :func:`hdl.vector.fitting.fit_function`.

Segment selection (exact, identical in the RTL and the golden model):

``uniform``
    ``segments`` equal segments over ``[lo, hi)``. ``t = mul32(add32(x, -lo), n / (hi - lo))``
    (both constants rounded to fp32) and the segment is ``floor(t)`` clamped to
    ``[0, segments - 1]``, taken from the bits of ``t``.
``log``
    ``|x|`` in ``[lo, hi)`` with ``lo`` and ``hi`` powers of two; each octave is split into
    ``segments`` (a power of two) equal parts, selected by the exponent and the top
    ``log2(segments)`` mantissa bits of ``|x|``.

In every segment the polynomial is evaluated in ``u = add32(x', -c)`` where ``c`` is the
segment's centre rounded to fp32 and ``x'`` is ``x`` (uniform) or ``|x|`` (log), by Horner's
scheme ``acc = c_d; acc = add32(mul32(acc, u), c_k)`` for ``k = d-1 .. 0``. With
``post_mul_x`` the polynomial approximates ``f(x) / x`` and the result is ``mul32(acc, x)``,
which keeps the relative error small where ``f`` crosses zero at the origin.

Outside the range, and for special inputs, the rules are (checked in this order):

1. a NaN input gives the canonical NaN ``0x7FC00000``;
2. log mode: a negative input (not -0) gives the canonical NaN (``negative="nan"``), or the
   function is evaluated at ``|x|`` and the result's sign flipped (``negative="odd"``, -0
   included, so that ``reciprocal(-0) = -inf``);
3. ``x' < lo`` gives ``below``, ``x' >= hi`` gives ``above``: either a constant (``"zero"``,
   ``"one"``, ``"minus_one"``, ``"inf"``, ``"minus_inf"``) or ``"x"`` (the input itself);
   in log mode the odd sign flip still applies to the constant.

``identity`` and ``relu`` are exact and use no polynomial (``mode="exact"``): relu gives +0.0
for ``x <= 0`` (also -0), ``x`` otherwise, NaN canonical.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FUNCTION_NAMES = ("identity", "relu", "exp", "gelu", "silu", "sigmoid", "tanh", "softplus",
                  "erf", "reciprocal", "rsqrt", "sqrt", "log")
MODES = ("uniform", "log", "exact")
RULES = ("zero", "one", "minus_one", "inf", "minus_inf", "x")
NEGATIVE_RULES = ("odd", "nan")

# fp32 bit patterns of the constant rules
RULE_BITS = {
    "zero": 0x00000000,
    "one": 0x3F800000,
    "minus_one": 0xBF800000,
    "inf": 0x7F800000,
    "minus_inf": 0xFF800000,
}


def _is_pow2_float(v: float) -> bool:
    if not v > 0 or math.isinf(v):
        return False
    m, _ = math.frexp(v)
    return m == 0.5


@dataclass(frozen=True)
class FunctionSpec:
    """How one activation function is approximated (see the module docstring).

    Parameters
    ----------
    name:
        Function name, one of :data:`FUNCTION_NAMES`.
    mode:
        ``"uniform"``, ``"log"`` or ``"exact"``.
    lo, hi:
        Input range ``[lo, hi)`` (of ``|x|`` in log mode, powers of two there).
    segments:
        Number of segments (uniform) or segments per octave (log, a power of two).
    degree:
        Polynomial degree (>= 0).
    post_mul_x:
        Fit ``f(x)/x`` and multiply the polynomial by ``x``.
    below, above:
        Rules for ``x' < lo`` and ``x' >= hi``.
    negative:
        Log mode only: ``"odd"`` or ``"nan"`` for negative inputs.
    root:
        A zero of ``f`` on a segment boundary (log's 1.0): the segments that end or start
        there take it as their centre and a zero constant coefficient, so that ``u`` is exact
        and the relative error stays small next to the root.
    """

    name: str
    mode: str = "uniform"
    lo: float = 0.0
    hi: float = 1.0
    segments: int = 1
    degree: int = 0
    post_mul_x: bool = False
    below: str = "zero"
    above: str = "zero"
    negative: str = "nan"
    root: float | None = None

    def __post_init__(self):
        if self.name not in FUNCTION_NAMES:
            raise ValueError(f"name must be one of {', '.join(FUNCTION_NAMES)}, "
                             f"not {self.name!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.mode == "exact":
            if self.name not in ("identity", "relu"):
                raise ValueError(f"mode must be 'uniform' or 'log' for {self.name}, "
                                 f"not {self.mode!r}")
            return
        for field in ("lo", "hi"):
            v = getattr(self, field)
            if not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"{field} must be a finite number, not {v!r}")
        if not self.lo < self.hi:
            raise ValueError(f"hi must be greater than lo={self.lo!r}, not {self.hi!r}")
        if not isinstance(self.segments, int) or self.segments < 1:
            raise ValueError(f"segments must be a positive integer, not {self.segments!r}")
        if not isinstance(self.degree, int) or not 0 <= self.degree <= 8:
            raise ValueError(f"degree must be an integer in 0..8, not {self.degree!r}")
        for field in ("below", "above"):
            v = getattr(self, field)
            if v not in RULES:
                raise ValueError(f"{field} must be one of {', '.join(RULES)}, not {v!r}")
        if self.root is not None and not (isinstance(self.root, int | float)
                                          and self.lo <= self.root <= self.hi):
            raise ValueError(f"root must be None or a number in [lo, hi], not {self.root!r}")
        if self.negative not in NEGATIVE_RULES:
            raise ValueError(f"negative must be one of {', '.join(NEGATIVE_RULES)}, "
                             f"not {self.negative!r}")
        if self.mode == "log":
            for field in ("lo", "hi"):
                v = getattr(self, field)
                if not _is_pow2_float(v) or not 2.0**-125 <= v <= 2.0**127:
                    raise ValueError(f"{field} must be a power of two in 2**-125 .. 2**127 "
                                     f"in log mode, not {v!r}")
            if self.segments & (self.segments - 1) or self.segments > 2**16:
                raise ValueError(f"segments must be a power of two up to 65536 in log mode, "
                                 f"not {self.segments!r}")
        elif self.segments > 2**16:
            raise ValueError(f"segments must be at most 65536, not {self.segments!r}")

    @property
    def rows(self) -> int:
        """Number of ROM rows (segments) this function occupies."""
        if self.mode == "exact":
            return 0
        if self.mode == "log":
            return self.octaves * self.segments
        return self.segments

    @property
    def octaves(self) -> int:
        return int(round(math.log2(self.hi) - math.log2(self.lo)))


DEFAULT_FUNCTIONS: tuple[FunctionSpec, ...] = (
    FunctionSpec("identity", mode="exact"),
    FunctionSpec("relu", mode="exact"),
    FunctionSpec("exp", lo=-87.0, hi=88.5, segments=256, degree=3,
                 below="zero", above="inf"),
    FunctionSpec("gelu", lo=-8.0, hi=8.0, segments=128, degree=3, post_mul_x=True,
                 below="zero", above="x"),
    FunctionSpec("silu", lo=-20.0, hi=20.0, segments=80, degree=3, post_mul_x=True,
                 below="zero", above="x"),
    FunctionSpec("sigmoid", lo=-20.0, hi=20.0, segments=80, degree=3,
                 below="zero", above="one"),
    FunctionSpec("tanh", lo=-9.0, hi=9.0, segments=36, degree=3, post_mul_x=True,
                 below="minus_one", above="one"),
    FunctionSpec("softplus", lo=-20.0, hi=20.0, segments=80, degree=3,
                 below="zero", above="x"),
    FunctionSpec("erf", lo=-4.0, hi=4.0, segments=32, degree=3, post_mul_x=True,
                 below="minus_one", above="one"),
    FunctionSpec("reciprocal", mode="log", lo=2.0**-16, hi=2.0**16, segments=4, degree=3,
                 below="inf", above="zero", negative="odd"),
    FunctionSpec("rsqrt", mode="log", lo=2.0**-16, hi=2.0**16, segments=4, degree=3,
                 below="inf", above="zero", negative="nan"),
    FunctionSpec("sqrt", mode="log", lo=2.0**-32, hi=2.0**32, segments=4, degree=3,
                 below="zero", above="inf", negative="nan"),
    FunctionSpec("log", mode="log", lo=2.0**-32, hi=2.0**32, segments=4, degree=3,
                 below="minus_inf", above="inf", negative="nan", root=1.0),
)
