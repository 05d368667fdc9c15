"""Descriptors of the scalar (activation) engine's functions.

A :class:`FunctionSpec` says how one function is approximated: the range of the polynomial's
argument, how that range is split into segments, the polynomial degree, and what happens
outside the range. The coefficients are computed from it by
:func:`hdl.vector.fitting.fit_function`. The RTL (:mod:`hdl.vector.activation`) and the golden
model (:mod:`sim.golden.activation`) evaluate exactly the steps below, in fp32 (``add32`` and
``mul32``: round to nearest even, subnormals kept, NaN canonical).

Range reduction
---------------
Eight functions reduce their argument (on the fp32 exponent, modulo pi/2, or to 1/x), so that
a small table serves the whole fp32 range; their segmentation and range are fixed by the
reduction (:data:`REDUCED`).
``x`` is first made normal: a subnormal ``|x|`` is multiplied by ``2**64`` (exact) and 64
taken off its exponent. Then ``|x| = m * 2**e`` with ``m`` in ``[1, 2)`` and:

``exp``
    ``t = mul32(x, log2(e))`` clamped to ``[-192, 192]``; ``s = add32(t, 1.5 * 2**23)`` rounds
    it to the integer ``k`` (read from the bits of ``s``), ``f = add32(t, -add32(s,
    -1.5 * 2**23))`` (exact) in ``[-0.5, 0.5]``; the polynomial approximates ``2**f``
    (uniform segments over ``[-0.5, 0.5)``) and the result is scaled by ``2**k``.
``log``
    ``m' = m`` and ``e' = e`` when ``m < sqrt(2)``, else ``m' = m / 2`` and ``e' = e + 1``; the
    polynomial approximates ``log(m')`` (octave segments over ``[0.5, 2)``) and the
    result is ``add32(mul32(float(e'), ln 2), p)``: no cancellation next to 1, where ``e' = 0``.
``sqrt``, ``rsqrt``
    ``m' = m`` for even ``e``, ``2 m`` for odd ``e`` (``m'`` in ``[1, 4)``, octave segments); the
    result is scaled by ``2**(e // 2)`` (sqrt) or ``2**-(e // 2)`` (rsqrt).
``reciprocal``
    ``m' = m`` (octave segments over ``[1, 2)``); the result is scaled by ``2**-e`` and takes
    the sign of ``x``.

``sin``, ``cos``
    ``|x| * 2/pi = q + f`` with the integer ``q`` and ``f`` in ``[-0.5, 0.5]``. For ``|x| >=
    0.5`` this is exact (Payne-Hanek, :mod:`hdl.vector.trig`): the mantissa of ``|x|`` times
    the 82 bits of ``2/pi`` its exponent selects, an integer product holding ``q mod 4`` and
    80 fraction bits; ``f`` above one half becomes ``f - 1`` (``q + 1``), and ``|f|`` is
    converted to fp32 by truncation. For ``|x| < 0.5`` (``q = 0``), ``f = mul32(|x|, 2/pi)``.
    Then ``sin(|x|) = sin(pi/2 (q + f))``: with ``q`` even the sine kernel, ``sin(pi f/2) =
    mul32(S(|f|), |f|)`` with ``f``'s sign, with ``q`` odd the cosine kernel ``C(|f|) =
    cos(pi f/2)``, negated when ``q mod 4 >= 2``. ``S`` and ``C`` are two tables of
    ``segments`` uniform segments over ``[0, 0.5]``, in that order (one copy in the ROM for
    both functions when they share range, segments and degree); the result takes ``x``'s
    sign for sin, and cos is sin with ``q + 1``. Every fp32 input is reduced exactly enough
    to keep ``f``'s fp32 value, so the relative error stays bounded next to the zeros of sin
    and cos too.
``arctan``
    ``|x| <= 1``: ``mul32(A(|x|), |x|)``; ``|x| > 1``: ``add32(pi/2, -mul32(A(r), r))`` with
    ``r = 1/|x|`` truncated to 24 bits (``floor(2**47 / M)`` of the 24-bit mantissa ``M``,
    ``r = 0`` where it would be subnormal, and for infinities); ``A(r) = arctan(r)/r`` one
    table of uniform segments over ``[0, 1]``; the result takes ``x``'s sign.

Scaling by ``2**k`` is ``mul32(mul32(p, 2**k1), 2**k2)`` with ``k1 = clamp(k, -126, 127)`` and
``k2 = clamp(k - k1, -126, 127)``: exact wherever the result is normal, rounded once (to
nearest even) where it is subnormal, infinity on overflow.

Special values of the reduced functions (IEEE 754 where it defines them):

============  ==========  =======  ==========================  =====
function      ``+-0``     ``+inf``  ``x < 0`` (``-inf`` too)    NaN
============  ==========  =======  ==========================  =====
exp           1           +inf     as for any ``x`` (-inf: +0)  NaN
log           -inf        +inf     NaN                          NaN
sqrt          ``+-0``     +inf     NaN                          NaN
rsqrt         ``+-inf``   +0       NaN                          NaN
reciprocal    ``+-inf``   +0       ``-reciprocal(-x)``          NaN
sin           ``+-0``     NaN      ``-sin(-x)``                 NaN
cos           1           NaN      ``cos(-x)``                  NaN
arctan        ``+-0``     pi/2     ``-arctan(-x)``              NaN
============  ==========  =======  ==========================  =====

Unreduced functions (segment selection exact, identical in the RTL and the golden model)
-----------------------------------------------------------------------------------------
``uniform``: ``segments`` equal segments over ``[lo, hi)``. ``t = mul32(add32(x, -lo),
n / (hi - lo))`` (both constants rounded to fp32) and the segment is ``floor(t)`` clamped to
``[0, segments - 1]``, taken from the bits of ``t``. (``log`` mode, octaves of ``m'`` each
split into ``segments`` equal parts, serves only the reduced functions; sin, cos and arctan
select their segment like this from the reduced argument, ``lo = 0``.)

In every segment the polynomial is evaluated in ``u = add32(x', -c)`` where ``c`` is the
segment's centre rounded to fp32 and ``x'`` the (reduced) argument, by Horner's scheme
``acc = c_d; acc = add32(mul32(acc, u), c_k)`` for ``k = d-1 .. 0``. With ``post_mul_x`` the
polynomial approximates ``f(x) / x`` and the result is ``mul32(acc, x)``, which keeps the
relative error small where ``f`` crosses zero at the origin and for tiny ``x``.

Outside the range, and for special inputs, the rules are (checked in this order):

1. a NaN input gives the canonical NaN ``0x7FC00000``;
2. ``x < lo`` gives ``below``, ``x >= hi`` gives ``above``: a constant (``"zero"``, ``"one"``,
   ``"minus_one"``, ``"inf"``, ``"minus_inf"``), ``"x"`` (the input itself), or (``below``
   only) ``"exp"``: the exp reduction above with the exp table, times ``x`` with
   ``post_mul_x``. That is the asymptote of sigmoid and softplus (``exp(x)``), of silu and
   mish (``x exp(x)``) and, with the exponent ``t = mul32(x, add32(a, mul32(b, x*x)))`` of
   :data:`EXP_TAIL_CUBIC`, of gelu_tanh, for very negative ``x``, accurate down to the
   smallest normal result. Where ``t < -192`` the result is a zero (with ``x``'s sign under
   ``post_mul_x``).

``identity``, ``relu``, ``square`` and ``abs`` are exact and use no polynomial
(``mode="exact"``): relu gives +0.0 for ``x <= 0`` (also -0), ``x`` otherwise; square is
``mul32(x, x)``; abs clears the sign; every NaN canonical.

Subnormal inputs are kept (made normal by the exact scaling above where the reduction reads
the exponent); subnormal results are rounded to nearest even by the last multiplication.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FUNCTION_NAMES = ("identity", "relu", "exp", "gelu", "silu", "sigmoid", "tanh", "softplus",
                  "erf", "reciprocal", "rsqrt", "sqrt", "log", "square", "abs", "mish",
                  "gelu_tanh", "sin", "cos", "arctan", "gelu_sigmoid", "silu_dx",
                  "gelu_sigmoid_dx", "gelu_dx", "erf_dx")
EXACT_NAMES = ("identity", "relu", "square", "abs")
MODES = ("uniform", "log", "exact")
RULES = ("zero", "one", "minus_one", "inf", "minus_inf", "x", "exp")

# The range-reduced functions (specs.model.RANGE_REDUCED): (mode, lo, hi) of the reduced
# argument, fixed by the reduction.
REDUCED = {
    "exp": ("uniform", -0.5, 0.5),
    "log": ("log", 0.5, 2.0),
    "sqrt": ("log", 1.0, 4.0),
    "rsqrt": ("log", 1.0, 4.0),
    "reciprocal": ("log", 1.0, 2.0),
    "sin": ("uniform", 0.0, 0.5),
    "cos": ("uniform", 0.0, 0.5),
    "arctan": ("uniform", 0.0, 1.0),
}
#: sin and cos: two tables of ``segments`` rows each, the sine kernel then the cosine kernel;
#: with the same range, segments and degree the two functions read one copy of them.
TRIG = ("sin", "cos")

# The exp tail's exponent for gelu_tanh, 0.5 x (1 + tanh(c (x + 0.044715 x**3))) =
# x sigmoid(2 c (x + 0.044715 x**3)) ~ x exp(z) with z = x (a + b x**2), where a and b
# carry the factor log2(e) of the exp reduction: t = mul32(x, add32(a, mul32(b, x*x))).
_C = 2.0 * math.sqrt(2.0 / math.pi) / math.log(2.0)
#: gelu_sigmoid, x sigmoid(1.702 x) ~ x exp(1.702 x): the exponent's linear term alone.
#: 1.702 is the approximation's constant (Hendrycks and Gimpel's GELU paper; the one
#: aws-neuron/nki-library's references of its Swish activation use: moe_tkg_torch.py).
GELU_SIGMOID = 1.702
EXP_TAIL_CUBIC = {"gelu_tanh": (_C, _C * 0.044715),
                  "gelu_sigmoid": (GELU_SIGMOID / math.log(2.0), 0.0)}
#: The fp32 values nearest the zeros of silu_dx (sigmoid(x) (1 + x (1 - sigmoid(x)))) and of
#: gelu_sigmoid_dx (silu_dx(1.702 x)): the anchors of their tables, segment boundaries with
#: quarter- and eighth-wide segments, so that the relative error stays small next to them.
SILU_DX_ZERO = -1.2784645557403564
GELU_SIGMOID_DX_ZERO = -0.7511542439460754
#: The fp32 value nearest the zero of gelu_dx (Phi(x) + x phi(x)), its table's anchor.
GELU_DX_ZERO = -0.7517915368080139

# fp32 bit patterns of the constant rules
RULE_BITS = {
    "zero": 0x00000000,
    "one": 0x3F800000,
    "minus_one": 0xBF800000,
    "inf": 0x7F800000,
    "minus_inf": 0xFF800000,
}


@dataclass(frozen=True)
class FunctionSpec:
    """How one activation function is approximated (see the module docstring).

    Parameters
    ----------
    name:
        Function name, one of :data:`FUNCTION_NAMES`.
    mode:
        ``"uniform"``, ``"log"`` (reduced functions only) or ``"exact"``.
    lo, hi:
        Range ``[lo, hi)`` of the polynomial's argument (fixed by :data:`REDUCED` for the
        reduced functions).
    segments:
        Number of segments (uniform) or segments per octave (log, a power of two).
    degree:
        Polynomial degree (>= 0).
    post_mul_x:
        Fit ``f(x)/x`` and multiply the polynomial by ``x``.
    below, above:
        Rules for ``x < lo`` and ``x >= hi`` (unreduced functions; the reduced ones take the
        special values of the module docstring).
    anchor:
        A segment boundary where ``f`` is exactly representable (exp's 0, log's, sqrt's,
        rsqrt's and reciprocal's 1): the segments that end or start there take it as their
        centre and ``f(anchor)`` as their constant coefficient, so that ``u`` is exact there,
        ``f(anchor)`` comes out exactly (``exp(0) = 1``, ``sqrt(4**k) = 2**k``, ``log(1) = 0``)
        and the relative error stays small next to a zero.
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
    anchor: float | None = None

    def __post_init__(self):
        if self.name not in FUNCTION_NAMES:
            raise ValueError(f"name must be one of {', '.join(FUNCTION_NAMES)}, "
                             f"not {self.name!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.mode == "exact":
            if self.name not in EXACT_NAMES:
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
            legal = RULES if field == "below" else RULES[:-1]
            if v not in legal:
                raise ValueError(f"{field} must be one of {', '.join(legal)}, not {v!r}")
        if self.anchor is not None and not (isinstance(self.anchor, int | float)
                                            and self.lo <= self.anchor <= self.hi):
            raise ValueError(f"anchor must be None or a number in [lo, hi], "
                             f"not {self.anchor!r}")
        if self.name in REDUCED:
            mode, lo, hi = REDUCED[self.name]
            if self.post_mul_x:
                raise ValueError(f"post_mul_x must be False for {self.name} (its reduction "
                                 f"fixes what multiplies the polynomial), not True")
            if (self.mode, self.lo, self.hi) != (mode, lo, hi):
                raise ValueError(f"mode, lo and hi must be {mode!r}, {lo!r}, {hi!r} for "
                                 f"{self.name} (fixed by its range reduction), not "
                                 f"{self.mode!r}, {self.lo!r}, {self.hi!r}")
        elif self.mode == "log":
            log_mode = [n for n, (mode, _, _) in REDUCED.items() if mode == "log"]
            raise ValueError(f"mode must be 'uniform' for {self.name} (log mode serves the "
                             f"range-reduced {', '.join(log_mode)}), not 'log'")
        if self.mode == "log":
            if self.segments & (self.segments - 1) or self.segments > 2**16:
                raise ValueError(f"segments must be a power of two up to 65536 in log mode, "
                                 f"not {self.segments!r}")
        elif self.segments > 2**16:
            raise ValueError(f"segments must be at most 65536, not {self.segments!r}")

    @property
    def reduced(self) -> bool:
        """Whether the argument is range-reduced (on the fp32 exponent, modulo pi/2 or to
        1/x)."""
        return self.name in REDUCED

    @property
    def rows(self) -> int:
        """Number of rows (segments) of this function's table (a table two functions share
        is held once: :func:`~hdl.vector.fitting.activation_table`)."""
        if self.mode == "exact":
            return 0
        if self.mode == "log":
            return self.octaves * self.segments
        if self.name in TRIG:
            return 2 * self.segments
        return self.segments

    @property
    def octaves(self) -> int:
        return int(round(math.log2(self.hi) - math.log2(self.lo)))


def _reduced(name: str, segments: int, degree: int, **kw) -> FunctionSpec:
    mode, lo, hi = REDUCED[name]
    return FunctionSpec(name, mode=mode, lo=lo, hi=hi, segments=segments, degree=degree, **kw)


DEFAULT_FUNCTIONS: tuple[FunctionSpec, ...] = (
    FunctionSpec("identity", mode="exact"),
    FunctionSpec("relu", mode="exact"),
    _reduced("exp", 8, 3, anchor=0.0),
    FunctionSpec("gelu", lo=-13.25, hi=8.0, segments=425, degree=3, post_mul_x=True,
                 below="zero", above="x", anchor=0.0),
    FunctionSpec("silu", lo=-20.0, hi=20.0, segments=80, degree=3, post_mul_x=True,
                 below="exp", above="x", anchor=0.0),
    FunctionSpec("sigmoid", lo=-20.0, hi=20.0, segments=80, degree=3,
                 below="exp", above="one", anchor=0.0),
    FunctionSpec("tanh", lo=-9.0, hi=9.0, segments=36, degree=3, post_mul_x=True,
                 below="minus_one", above="one", anchor=0.0),
    FunctionSpec("softplus", lo=-20.0, hi=20.0, segments=80, degree=3,
                 below="exp", above="x"),
    FunctionSpec("erf", lo=-4.0, hi=4.0, segments=32, degree=3, post_mul_x=True,
                 below="minus_one", above="one"),
    _reduced("reciprocal", 8, 3, anchor=1.0),
    _reduced("rsqrt", 4, 3, anchor=1.0),
    _reduced("sqrt", 4, 3, anchor=1.0),
    _reduced("log", 8, 3, anchor=1.0),
    FunctionSpec("square", mode="exact"),
    FunctionSpec("abs", mode="exact"),
    FunctionSpec("mish", lo=-20.0, hi=20.0, segments=80, degree=3, post_mul_x=True,
                 below="exp", above="x"),
    FunctionSpec("gelu_tanh", lo=-4.0, hi=8.0, segments=96, degree=3, post_mul_x=True,
                 below="exp", above="x", anchor=0.0),
    _reduced("sin", 2, 3, anchor=0.0),
    _reduced("cos", 2, 3, anchor=0.0),
    _reduced("arctan", 4, 3, anchor=0.0),
    FunctionSpec("gelu_sigmoid", lo=-12.0, hi=12.0, segments=96, degree=3, post_mul_x=True,
                 below="exp", above="x", anchor=0.0),
    # down to where the result leaves the normal numbers (about -91.8 and -54.0)
    FunctionSpec("silu_dx", lo=SILU_DX_ZERO - 363 * 0.25, hi=SILU_DX_ZERO + 85 * 0.25,
                 segments=448, degree=3, below="zero", above="one", anchor=SILU_DX_ZERO),
    FunctionSpec("gelu_sigmoid_dx", lo=GELU_SIGMOID_DX_ZERO - 426 * 0.125,
                 hi=GELU_SIGMOID_DX_ZERO + 102 * 0.125, segments=528, degree=3,
                 below="zero", above="one", anchor=GELU_SIGMOID_DX_ZERO),
    # Gaussian tails, down to where the result leaves the normal numbers (about -13.34 and
    # +-9.35); gelu_dx's segments a 32nd wide, so that its zero stays a segment boundary, and
    # up to where it is 1 within the bound (about 4.5)
    FunctionSpec("gelu_dx", lo=GELU_DX_ZERO - 403 / 32, hi=GELU_DX_ZERO + 185 / 32,
                 segments=588, degree=3, below="zero", above="one", anchor=GELU_DX_ZERO),
    FunctionSpec("erf_dx", lo=-9.4, hi=9.4, segments=500, degree=3,
                 below="zero", above="zero"),
)

# The exp table that the ``below="exp"`` rule reads when the set has no exp function.
EXP_TAIL = DEFAULT_FUNCTIONS[2]
