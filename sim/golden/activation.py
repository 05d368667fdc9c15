"""Bit-exact golden model of the scalar (activation) engine.

``out = f(add32(mul32(data, scale), bias))`` per element, with ``scale`` and ``bias`` per
partition (lane), ``f`` the piecewise polynomial of :mod:`hdl.vector.functions` evaluated
with exactly the RTL's fp32 operations in the RTL's order, and a running sum per lane
``sum = add32(sum, out)`` along the free axis, starting from +0.0 and restarting after each
element flagged ``last``. All values are fp32 bit patterns in ``uint32`` arrays.
"""

from __future__ import annotations

import numpy as np

from hdl.vector.fitting import activation_table, rom_words
from hdl.vector.functions import RULE_BITS, FunctionSpec
from sim.golden.numerics import add32, mul32

NAN = np.uint32(0x7FC00000)
SIGN = np.uint32(0x80000000)


def _f32bits(v: float) -> np.uint32:
    return np.array([v], dtype=np.float32).view(np.uint32)[0]


def _lt(a, b):
    """fp32 ``a < b`` on bit patterns (IEEE: NaN compares false, -0 == +0)."""
    return a.view(np.float32) < b.view(np.float32)


def uniform_index(t: np.ndarray, n: int) -> np.ndarray:
    """``floor(t)`` clamped to ``[0, n-1]`` from the bits of fp32 ``t`` (NaN gives 0)."""
    tf = t.view(np.float32)
    e = ((t >> 23) & 0xFF).astype(np.int64) - 127
    m = ((t & 0x7FFFFF) | 0x800000).astype(np.int64)
    shift = np.clip(23 - e, 0, 31)
    i = np.where((tf >= 1.0) & (e <= 23), m >> shift, n - 1)
    i = np.where(tf >= np.float32(n), n - 1, i)
    i = np.where(tf >= 1.0, i, 0)
    return np.minimum(i, n - 1)


def log_index(xa: np.ndarray, spec: FunctionSpec) -> np.ndarray:
    """Segment of ``|x|`` in log mode: octave from the exponent, part from the mantissa."""
    kb = spec.segments.bit_length() - 1
    e_lo = int(round(np.log2(spec.lo))) + 127
    e = ((xa >> 23) & 0xFF).astype(np.int64)
    top = ((xa & 0x7FFFFF) >> (23 - kb)).astype(np.int64)
    i = ((e - e_lo) << kb) | top
    return np.clip(i, 0, spec.rows - 1)


def _rule(rule: str, x: np.ndarray) -> np.ndarray:
    if rule == "x":
        return x
    return np.full_like(x, RULE_BITS[rule])


def evaluate(functions: tuple[FunctionSpec, ...], index: int, x) -> np.ndarray:
    """``f(x)`` of function ``functions[index]`` for fp32 bit patterns ``x`` (any shape)."""
    x = np.asarray(x, dtype=np.uint32)
    spec = functions[index]
    xf = x.view(np.float32)
    nan = np.isnan(xf)
    if spec.mode == "exact":
        y = x if spec.name == "identity" else np.where(xf > 0, x, np.uint32(0))
        return np.where(nan, NAN, y).astype(np.uint32)
    table = activation_table(functions)[index]
    degree, _ = rom_words(functions)
    lo, hi = _f32bits(spec.lo), _f32bits(spec.hi)
    if spec.mode == "log":
        xs = x & ~SIGN
        flip = (x & SIGN) != 0
        negative = flip & (xs != 0)
        i = log_index(xs, spec)
    else:
        xs = x
        flip = np.zeros(x.shape, dtype=bool)
        neg_lo = _f32bits(-spec.lo)
        inv_w = _f32bits(spec.segments / (spec.hi - spec.lo))
        t = mul32(add32(xs, neg_lo), inv_w)
        i = uniform_index(t, spec.segments)
    u = add32(xs, table.centres[i] ^ SIGN)
    coeffs = np.zeros(i.shape + (degree + 1,), dtype=np.uint32)
    coeffs[..., : spec.degree + 1] = table.coeffs[i]
    acc = coeffs[..., degree]
    for k in range(degree - 1, -1, -1):
        acc = add32(mul32(acc, u), coeffs[..., k])
    if spec.post_mul_x:
        acc = mul32(acc, xs)
    below = _lt(xs, np.full_like(xs, lo))
    above = ~_lt(xs, np.full_like(xs, hi)) & ~nan
    y = np.where(below, _rule(spec.below, x), acc)
    y = np.where(above, _rule(spec.above, x), y)
    if spec.mode == "log":
        if spec.negative == "odd":
            keep_x = (below & (spec.below == "x")) | (above & (spec.above == "x"))
            y = np.where(flip & ~keep_x, y ^ SIGN, y)
        else:
            y = np.where(negative, NAN, y)
    return np.where(nan, NAN, y).astype(np.uint32)


def run(params, func: int, data, scale, bias, last) -> tuple[np.ndarray, np.ndarray]:
    """The engine on a stream: ``data`` ``(elements, lanes)`` uint32, ``scale`` and ``bias``
    ``(lanes,)``, ``last`` ``(elements,)`` bool. Returns ``(out, running_sum)``, each
    ``(elements, lanes)``; ``running_sum[e]`` includes element ``e``."""
    data = np.asarray(data, dtype=np.uint32).reshape(-1, params.lanes)
    x = add32(mul32(data, np.asarray(scale, np.uint32)), np.asarray(bias, np.uint32))
    out = evaluate(params.functions, func, x)
    sums = np.empty_like(out)
    acc = np.zeros(params.lanes, dtype=np.uint32)
    for e in range(out.shape[0]):
        acc = add32(acc, out[e])
        sums[e] = acc
        if last[e]:
            acc = np.zeros_like(acc)
    return out, sums
