"""Bit-exact golden model of the scalar (activation) engine.

``out = f(add32(mul32(data, scale), bias))`` per element, with ``scale`` and ``bias`` per
partition (lane), ``f`` the function of :mod:`hdl.vector.functions` (range reduction,
piecewise polynomial, special values) evaluated with exactly the RTL's fp32 operations in the
RTL's order, and a running sum per lane ``sum = add32(sum, out)`` along the free axis, starting
from +0.0 and restarting after each element flagged ``last``. All values are fp32 bit
patterns in ``uint32`` arrays.

Public API (used by the RTL testbenches and the core simulator):

* :func:`evaluate`: ``f(x)`` of one function of a set, on fp32 bit patterns of any shape;
* :func:`run`: the engine on a stream, with the per-lane scale, bias and running sum.
"""

from __future__ import annotations

import functools

import numpy as np

from hdl.numerics import constants
from hdl.numerics.constants import SQRT2_MANT
from hdl.vector import trig
from hdl.vector.fitting import activation_table, exp_index, rom_words
from hdl.vector.functions import EXP_TAIL_CUBIC, RULE_BITS, TRIG, FunctionSpec
from sim.golden.convert import cast_output, widen_input
from sim.golden.numerics import add32, mul32

# The contract's constants as uint32 scalars, so that numpy arithmetic on bit patterns stays uint32.
(CANONICAL_NAN32, SIGN32, INF32, MAGIC32, ONE32, LOG2E32, LN2_32, T_MAX32, TWO64_32, TWO_OVER_PI32,
 HALF_PI32) = map(np.uint32, (
    constants.CANONICAL_NAN32, constants.SIGN32, constants.INF32, constants.MAGIC32,
    constants.ONE32, constants.LOG2E32, constants.LN2_32, constants.T_MAX32, constants.TWO64_32,
    constants.TWO_OVER_PI32, constants.HALF_PI32))


def f32_bits(v: float) -> np.uint32:
    """The fp32 bit pattern of ``v`` (rounded to nearest even)."""
    return np.array([v], dtype=np.float32).view(np.uint32)[0]


_WINDOWS = np.array([trig.window(e) for e in range(trig.E_MIN, trig.E_MAX + 1)], dtype=object)


def trig_reduce(x) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(f, q, half)`` of sin and cos (see :mod:`hdl.vector.functions`): ``|x| * 2/pi =
    q + f`` with ``f`` in ``[-0.5, 0.5]``; ``f`` is returned as the fp32 bits of ``|f|``,
    ``q`` modulo 4, ``half`` where ``f`` is negative (the fraction was above one half)."""
    xs = np.asarray(x, dtype=np.uint32) & ~SIGN32
    e = (xs >> 23).astype(np.int64) - 127
    exact = e >= trig.E_MIN
    small = mul32(xs, TWO_OVER_PI32)
    mag = np.zeros(xs.shape, dtype=object)
    q = np.zeros(xs.shape, dtype=np.int64)
    half = np.zeros(xs.shape, dtype=bool)
    if exact.any():
        bits = trig.FRACTION_BITS
        m = ((xs[exact] & 0x7FFFFF) | 0x800000).astype(object)
        p = m * _WINDOWS[np.minimum(e[exact], trig.E_MAX) - trig.E_MIN]
        frac = p & ((1 << bits) - 1)
        h = (frac >> (bits - 1)).astype(bool)
        mag[exact] = np.where(h, (1 << bits) - frac, frac)
        q[exact] = ((p >> bits) + h).astype(np.int64) & 3
        half[exact] = h
    n = np.frompyfunc(int.bit_length, 1, 1)(mag).astype(np.int64)
    top = (mag << (trig.FRACTION_BITS - n)) >> (trig.FRACTION_BITS - 24)  # 24 bits, truncated
    f_exact = np.where(n > 0, ((n + 127 - 1 - trig.FRACTION_BITS) << 23)
                       | (top.astype(np.int64) & 0x7FFFFF), 0).astype(np.uint32)
    return np.where(exact, f_exact, small).astype(np.uint32), q, half


def atan_reduce(x) -> tuple[np.ndarray, np.ndarray]:
    """``(r, big)`` of arctan: ``big`` where ``|x| > 1``, then ``r = 1/|x|`` truncated to 24
    bits (0 where it would be subnormal, and for infinities); ``r = |x|`` elsewhere."""
    xs = np.asarray(x, dtype=np.uint32) & ~SIGN32
    big = xs > ONE32
    e = (xs >> 23).astype(np.int64) - 127
    mant = (xs & 0x7FFFFF).astype(np.int64)
    quotient = (1 << 47) // (mant | 0x800000)
    field = 127 - e - (mant != 0)
    r = np.where(field >= 1, (np.maximum(field, 0) << 23) | (quotient & 0x7FFFFF), 0)
    return np.where(big, r.astype(np.uint32), xs).astype(np.uint32), big


def _lt(a, b):
    """fp32 ``a < b`` on bit patterns (IEEE: NaN compares false, -0 == +0)."""
    return a.view(np.float32) < b.view(np.float32)


def uniform_index(t: np.ndarray, n) -> np.ndarray:
    """``floor(t)`` clamped to ``[0, n-1]`` from the bits of fp32 ``t`` (NaN gives 0)."""
    n = np.asarray(n, dtype=np.int64)
    tf = t.view(np.float32)
    e = ((t >> 23) & 0xFF).astype(np.int64) - 127
    m = ((t & 0x7FFFFF) | 0x800000).astype(np.int64)
    shift = np.clip(23 - e, 0, 31)
    i = np.where((tf >= 1.0) & (e <= 23), m >> shift, n - 1)
    i = np.where(tf >= n.astype(np.float32), n - 1, i)
    i = np.where(tf >= 1.0, i, 0)
    return np.minimum(i, n - 1)


def log_index(m: np.ndarray, spec: FunctionSpec) -> np.ndarray:
    """Segment of the positive ``m`` in log mode: octave from the exponent, part from the
    mantissa."""
    kb = spec.segments.bit_length() - 1
    e_lo = int(round(np.log2(spec.lo))) + 127
    e = ((m >> 23) & 0xFF).astype(np.int64)
    top = ((m & 0x7FFFFF) >> (23 - kb)).astype(np.int64)
    i = ((e - e_lo) << kb) | top
    return np.clip(i, 0, spec.rows - 1)


def pow2(k) -> np.ndarray:
    """fp32 bits of ``2**k`` for integers ``k`` in ``[-126, 127]``."""
    return ((np.asarray(k, dtype=np.int64) + 127) << 23).astype(np.uint32)


def scale_pow2(p, k) -> np.ndarray:
    """``p * 2**k`` as ``mul32(mul32(p, 2**k1), 2**k2)``, ``k1 = clamp(k, -126, 127)``,
    ``k2 = clamp(k - k1, -126, 127)``: exact for normal results, one rounding below."""
    k = np.asarray(k, dtype=np.int64)
    k1 = np.clip(k, -126, 127)
    k2 = np.clip(k - k1, -126, 127)
    return mul32(mul32(p, pow2(k1)), pow2(k2))


def exp_reduce(x, cubic: tuple[float, float] | None = None):
    """``(f, k, low)`` with ``exp(z) ~ 2**f * 2**k``: ``t = mul32(x, log2 e)`` (or, with the
    tail's ``cubic = (a, b)``, ``t = mul32(x, add32(a, mul32(b, mul32(x, x))))``), ``low``
    where ``t < -192`` (the result underflows whatever multiplies it), ``t`` clamped to
    ``[-192, 192]``, ``k`` its nearest integer (ties to even), ``f = t - k`` (exact)."""
    if cubic is None:
        t = mul32(x, LOG2E32)
    else:
        a, b = f32_bits(cubic[0]), f32_bits(cubic[1])
        t = mul32(x, add32(np.full_like(x, a), mul32(np.full_like(x, b), mul32(x, x))))
    low = _lt(t, T_MAX32 | SIGN32)
    t = np.where(low, T_MAX32 | SIGN32, np.where(_lt(T_MAX32, t), T_MAX32, t))
    s = add32(t, MAGIC32)
    k = (s & 0x7FFFFF).astype(np.int64) - 0x400000
    f = add32(t, add32(s, MAGIC32 | SIGN32) ^ SIGN32)
    return f, k, low


def normalise(xs) -> tuple[np.ndarray, np.ndarray]:
    """``(xn, e)`` for a magnitude ``xs``: subnormals scaled by ``2**64`` (exact), ``e`` the
    unbiased exponent of ``xs`` (``xs = 1.mant(xn) * 2**e`` for nonzero finite ``xs``)."""
    sub = ((xs >> 23) == 0) & (xs != 0)
    xn = np.where(sub, mul32(xs, TWO64_32), xs)
    e = ((xn >> 23) & 0xFF).astype(np.int64) - 127 - 64 * sub
    return xn, e


def reduce_log_domain(name: str, x) -> tuple[np.ndarray, np.ndarray]:
    """``(m, k)`` of log, sqrt, rsqrt and reciprocal (see :mod:`hdl.vector.functions`): the
    polynomial's argument ``m`` and ``k``, the power of two the result is scaled by (for log:
    ``e'``, whose ``e' ln 2`` is added)."""
    xn, e = normalise(x & ~SIGN32)
    mant = (xn & 0x7FFFFF).astype(np.int64)
    if name == "log":
        half = (mant >= SQRT2_MANT).astype(np.int64)
        return ((((127 - half) << 23) | mant).astype(np.uint32), e + half)
    if name == "reciprocal":
        return ((127 << 23) | mant).astype(np.uint32), -e
    odd = e & 1
    m = (((127 + odd) << 23) | mant).astype(np.uint32)
    return m, (e >> 1) if name == "sqrt" else -(e >> 1)


def int_to_f32(k) -> np.ndarray:
    """fp32 bits of the integer ``k`` (``|k| < 2**22``), exactly:
    ``add32(MAGIC32 + k, -MAGIC32)``."""
    return add32((MAGIC32.astype(np.int64) + np.asarray(k, dtype=np.int64)).astype(np.uint32),
                 MAGIC32 | SIGN32)


@functools.lru_cache(maxsize=16)
def _rom(functions: tuple[FunctionSpec, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The ROM as arrays: centres ``(rows,)`` and coefficients ``(rows, degree + 1)``."""
    degree, words = rom_words(functions)
    w = np.array([[(word >> (32 * j)) & 0xFFFFFFFF for j in range(degree + 2)]
                  for word in words] or np.zeros((0, degree + 2)), dtype=np.uint32)
    w.setflags(write=False)
    return w[:, 0], w[:, 1:]


def _segment(spec: FunctionSpec, arg) -> np.ndarray:
    if spec.mode == "log":
        return log_index(arg, spec)
    t = mul32(add32(arg, f32_bits(-spec.lo)), f32_bits(spec.segments / (spec.hi - spec.lo)))
    return uniform_index(t, spec.segments)


def _horner(functions, row, u) -> np.ndarray:
    _, coeffs = _rom(functions)
    c = coeffs[row]
    acc = c[..., -1]
    for k in range(c.shape[-1] - 2, -1, -1):
        acc = add32(mul32(acc, u), c[..., k])
    return acc


def _rule(rule: str, x: np.ndarray) -> np.ndarray:
    if rule == "x":
        return x
    return np.full_like(x, RULE_BITS[rule])


def evaluate(functions: tuple[FunctionSpec, ...], index: int, x) -> np.ndarray:
    """``f(x)`` of function ``functions[index]`` for fp32 bit patterns ``x`` (any shape).

    Bit-exact to the RTL (:class:`hdl.vector.activation.ActivationLane`), special values and
    subnormals included (see :mod:`hdl.vector.functions`). Returns ``uint32`` bit patterns.
    """
    x = np.asarray(x, dtype=np.uint32)
    spec = functions[index]
    xf = x.view(np.float32)
    nan = np.isnan(xf)
    if spec.mode == "exact":
        y = {"identity": lambda: x, "relu": lambda: np.where(xf > 0, x, np.uint32(0)),
             "square": lambda: mul32(x, x), "abs": lambda: x & ~SIGN32}[spec.name]()
        return np.where(nan, CANONICAL_NAN32, y).astype(np.uint32)
    tables = activation_table(functions)
    centres, _ = _rom(functions)
    sign = (x & SIGN32) != 0
    zero = (x & ~SIGN32) == 0
    inf = (x & ~SIGN32) == INF32
    own = tables[index]
    k = np.zeros(x.shape, np.int64)
    arg = x
    use_exp = low = np.zeros(x.shape, bool)
    if spec.name in TRIG or spec.name == "arctan":
        return _trig_atan(functions, index, x)
    if spec.name == "exp" or (not spec.reduced and spec.below == "exp"):
        f, kx, low = exp_reduce(x, EXP_TAIL_CUBIC.get(spec.name))
        use_exp = _lt(x, f32_bits(spec.lo)) | (spec.name == "exp")
        arg, k = np.where(use_exp, f, x), np.where(use_exp, kx, 0)
    elif spec.reduced:
        arg, k = reduce_log_domain(spec.name, x)
    row = own.base + _segment(spec, arg)
    if use_exp.any():
        tail = tables[exp_index(functions)]
        row = np.where(use_exp, tail.base + _segment(tail.spec, arg), row)
    u = add32(arg, centres[row] ^ SIGN32)
    acc = _horner(functions, row, u)
    if spec.post_mul_x:
        acc = mul32(acc, x)
    if spec.name == "log":
        y = add32(mul32(int_to_f32(k), LN2_32), acc)
    else:
        y = scale_pow2(acc, k)
    if spec.name == "log":
        y = np.where(zero, RULE_BITS["minus_inf"], np.where(inf & ~sign, INF32, y))
        y = np.where(sign & ~zero, CANONICAL_NAN32, y)
    elif spec.name in ("sqrt", "rsqrt"):
        at_zero = x if spec.name == "sqrt" else (x & SIGN32) | INF32
        at_inf = INF32 if spec.name == "sqrt" else np.uint32(0)
        y = np.where(zero, at_zero, np.where(inf, at_inf, y))
        y = np.where(sign & ~zero, CANONICAL_NAN32, y)
    elif spec.name == "reciprocal":
        y = np.where(zero, INF32, np.where(inf, np.uint32(0), y)) | (x & SIGN32)
    elif spec.name != "exp":
        if spec.below == "exp":  # x exp(z) where exp(z) underflows: a zero, x's sign
            y = np.where(use_exp & low, SIGN32 if spec.post_mul_x else np.uint32(0), y)
        else:
            y = np.where(_lt(x, f32_bits(spec.lo)), _rule(spec.below, x), y)
        y = np.where(~_lt(x, f32_bits(spec.hi)) & ~nan, _rule(spec.above, x), y)
    return np.where(nan, CANONICAL_NAN32, y).astype(np.uint32)


def _trig_atan(functions, index, x) -> np.ndarray:
    spec = functions[index]
    own = activation_table(functions)[index]
    centres, _ = _rom(functions)
    sign = (x & SIGN32) != 0
    inf = (x & ~SIGN32) == INF32
    if spec.name == "arctan":
        arg, big = atan_reduce(x)
        kernel_cos = np.zeros(x.shape, bool)
    else:
        arg, q, half = trig_reduce(x)
        q = (q + (spec.name == "cos")) & 3
        kernel_cos = (q & 1) == 1
    row = own.base + _segment(spec, arg) + np.where(kernel_cos, spec.segments, 0)
    acc = _horner(functions, row, add32(arg, centres[row] ^ SIGN32))
    post = mul32(acc, arg)
    if spec.name == "arctan":
        y = np.where(big, add32(np.full_like(x, HALF_PI32), post ^ SIGN32), post) | (x & SIGN32)
    else:
        neg = ((q & 2) != 0) ^ (~kernel_cos & half) ^ (sign & (spec.name == "sin"))
        y = np.where(kernel_cos, acc, post) ^ np.where(neg, SIGN32, np.uint32(0))
        y = np.where(inf, CANONICAL_NAN32, y)
    return np.where(np.isnan(x.view(np.float32)), CANONICAL_NAN32, y).astype(np.uint32)


def run(params, func: int, data, scale, bias, last, *, in_format: str = "fp32",
        out_format: str = "fp32", rounding: str = "rne", beat: int = 0
        ) -> tuple[np.ndarray, np.ndarray]:
    """The engine on a stream.

    ``data`` ``(elements, lanes)`` lane words in ``in_format`` (widened exactly), ``scale``
    and ``bias`` ``(lanes,)`` fp32, ``last`` ``(elements,)`` bool. Returns ``(out,
    running_sum)``, each ``(elements, lanes)`` ``uint32``: ``out`` in ``out_format``
    (``rounding`` ``"rne"`` or ``"stochastic"``, see :func:`sim.golden.convert.cast_output`
    for ``beat``), ``running_sum[e]`` the fp32 sum of the rows' fp32 results up to and
    including element ``e`` (before the cast)."""
    data = np.asarray(data, dtype=np.uint32).reshape(-1, params.lanes)
    x = add32(mul32(widen_input(data, in_format), np.asarray(scale, np.uint32)),
              np.asarray(bias, np.uint32))
    y = evaluate(params.functions, func, x)
    sums = np.empty_like(y)
    acc = np.zeros(params.lanes, dtype=np.uint32)
    for e in range(y.shape[0]):
        acc = add32(acc, y[e])
        sums[e] = acc
        if last[e]:
            acc = np.zeros_like(acc)
    out = cast_output(y, out_format, rounding, params.rng, params.seed, beat)
    return out, sums
