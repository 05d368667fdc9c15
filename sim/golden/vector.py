"""Bit-exact golden model of the vector engine.

Per lane (partition) and element: ``r = op(a, b)`` with ``b`` the second tensor or the lane's
scalar (:class:`~hdl.vector.ops.VectorOp`), then, unless ``op1`` is COPY, ``r = op1(r,
scalar1)`` on the fp32 ``r`` with the lane's second scalar, then an optional reduction along
the free axis (:class:`~hdl.vector.ops.Reduce`), emitted on the element flagged ``last``,
then the output cast to the instruction's format. A scan (:func:`scan`) instead carries
each row's running value from element to element: ``r = op1(op0(a, r_prev), b)``. Values are
fp32 bit patterns (or narrow ones in the low bits) in ``uint32`` arrays of shape
``(elements, lanes)``.
"""

from __future__ import annotations

import numpy as np

from hdl.numerics import constants
from hdl.vector.ops import Draw, Reduce, VectorOp
from sim.golden.convert import cast_output, check_rounding, widen_input
from sim.golden.numerics import add32, mul32, random_words

# The contract's constants as uint32 scalars, so that numpy arithmetic on bit patterns stays uint32.
CANONICAL_NAN32, SIGN32, ONE32, NEG_INF32 = map(np.uint32, (
    constants.CANONICAL_NAN32, constants.SIGN32, constants.ONE32, constants.NEG_INF32))


def _f(x):
    return x.view(np.float32)


def fmax(a, b):
    nan = np.isnan(_f(a)) | np.isnan(_f(b))
    return np.where(nan, CANONICAL_NAN32, np.where(_f(b) > _f(a), b, a)).astype(np.uint32)


def fmin(a, b):
    nan = np.isnan(_f(a)) | np.isnan(_f(b))
    return np.where(nan, CANONICAL_NAN32, np.where(_f(b) < _f(a), b, a)).astype(np.uint32)


def _flag(c):
    return np.where(c, ONE32, np.uint32(0)).astype(np.uint32)


def _canonical(x):
    return np.where(np.isnan(_f(x)), CANONICAL_NAN32, x).astype(np.uint32)


def _true(x):
    """Each fp32 value's truth: anything but +0 and -0 (a NaN included)."""
    return (x & ~SIGN32) != 0


def _by_magnitude(a, b, keep_a):
    """``a`` where ``keep_a(|a|, |b|)``, else ``b`` (signs kept); the canonical NaN if either
    is NaN. Magnitudes compare as the words without their sign bits."""
    nan = np.isnan(_f(a)) | np.isnan(_f(b))
    return np.where(nan, CANONICAL_NAN32,
                    np.where(keep_a(a & ~SIGN32, b & ~SIGN32), a, b)).astype(np.uint32)


def _shift(a, b, shift):
    """``a``'s word shifted by ``b``'s word as an unsigned count, zeros shifted in; 0 from
    a count of 32 on."""
    return np.where(b >= 32, np.uint32(0), shift(a, b & np.uint32(31))).astype(np.uint32)


def _power(a, b):
    """``a`` raised to ``b``: numpy's power of the two in float64, rounded to fp32 (nearest
    even, subnormals kept), a NaN canonical."""
    with np.errstate(all="ignore"):
        r = np.power(_f(a).astype(np.float64), _f(b).astype(np.float64)).astype(np.float32)
    return _canonical(r.view(np.uint32))


def _rsqrt(a):
    """``1 / sqrt(a)`` in float64, rounded to fp32 (a negative number's a NaN, canonical)."""
    with np.errstate(all="ignore"):
        r = (1.0 / np.sqrt(_f(a).astype(np.float64))).astype(np.float32)
    return _canonical(r.view(np.uint32))


def elementwise(op: VectorOp, a, b) -> np.ndarray:
    """``op(a, b)`` elementwise on fp32 bit patterns."""
    a = np.asarray(a, dtype=np.uint32)
    b = np.broadcast_to(np.asarray(b, dtype=np.uint32), a.shape)
    op = VectorOp(op)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        table = {
            VectorOp.COPY: lambda: _canonical(a),
            VectorOp.ADD: lambda: add32(a, b),
            VectorOp.SUBTRACT: lambda: add32(a, b ^ SIGN32),
            VectorOp.MULTIPLY: lambda: mul32(a, b),
            VectorOp.MAX: lambda: fmax(a, b),
            VectorOp.MIN: lambda: fmin(a, b),
            VectorOp.IS_EQUAL: lambda: _flag(_f(a) == _f(b)),
            VectorOp.NOT_EQUAL: lambda: _flag(_f(a) != _f(b)),
            VectorOp.GREATER: lambda: _flag(_f(a) > _f(b)),
            VectorOp.GREATER_EQUAL: lambda: _flag(_f(a) >= _f(b)),
            VectorOp.LESS: lambda: _flag(_f(a) < _f(b)),
            VectorOp.LESS_EQUAL: lambda: _flag(_f(a) <= _f(b)),
            VectorOp.BITWISE_AND: lambda: a & b,
            VectorOp.BITWISE_OR: lambda: a | b,
            VectorOp.BITWISE_XOR: lambda: a ^ b,
            VectorOp.ABS: lambda: _canonical(a & ~SIGN32),
            VectorOp.SQUARE: lambda: mul32(a, a),
            VectorOp.LOGICAL_AND: lambda: _flag(_true(a) & _true(b)),
            VectorOp.LOGICAL_OR: lambda: _flag(_true(a) | _true(b)),
            VectorOp.LOGICAL_XOR: lambda: _flag(_true(a) ^ _true(b)),
            VectorOp.ABS_MAX: lambda: _by_magnitude(a, b, np.greater),
            VectorOp.ABS_MIN: lambda: _by_magnitude(a, b, np.less),
            VectorOp.LEFT_SHIFT: lambda: _shift(a, b, np.left_shift),
            VectorOp.RIGHT_SHIFT: lambda: _shift(a, b, np.right_shift),
            VectorOp.POWER: lambda: _power(a, b),
            VectorOp.RECIPROCAL: lambda: _canonical((np.float32(1.0) / _f(a)).view(np.uint32)),
            VectorOp.RSQRT: lambda: _rsqrt(a),
        }
        return np.asarray(table[op](), dtype=np.uint32)


def scan(op0, op1, a, b, initial, starts=None, reverse0: bool = False,
         reverse1: bool = False) -> np.ndarray:
    """The fp32 results of a scan on fp32 bit patterns ``a`` and ``b`` (``(elements,
    lanes)``): per lane ``r[e] = op1(op0(a[e], r[e - 1]), b[e])``, ``reverse0`` /
    ``reverse1`` swapping the operands of ``op0`` / ``op1``; both operations are applied
    whatever they are (COPY included). ``r[e - 1]`` is ``initial`` (``(lanes,)``) at each
    element flagged in ``starts`` (a bool array of length ``elements``; the first element
    alone when None)."""
    a = np.asarray(a, dtype=np.uint32)
    b = np.broadcast_to(np.asarray(b, dtype=np.uint32), a.shape)
    initial = np.broadcast_to(np.asarray(initial, dtype=np.uint32), a.shape[1:])
    if starts is None:
        starts = np.zeros(len(a), dtype=bool)
        starts[:1] = True
    out = np.empty_like(a)
    prev = initial
    for e in range(len(a)):
        if starts[e]:
            prev = initial
        x = elementwise(op0, *((prev, a[e]) if reverse0 else (a[e], prev)))
        prev = out[e] = elementwise(op1, *((b[e], x) if reverse1 else (x, b[e])))
    return out


def run(params, op, a, b=None, last=None, scalar=None, reduce=Reduce.NONE,
        in_format: str = "fp32", out_format: str = "fp32", rounding: str = "rne",
        beat: int = 0, b_format: str | None = None, op1=VectorOp.COPY,
        scalar1=None, scanning: bool = False, reverse0: bool = False,
        reverse1: bool = False, draw=Draw.NONE) -> np.ndarray:
    """The engine on a stream of ``(elements, lanes)`` operands.

    ``a`` is lane words in ``in_format``, ``b`` in ``b_format`` (``in_format`` when None),
    each widened exactly to fp32 (:func:`sim.golden.convert.widen_input`); ``b`` is ignored
    when ``scalar`` (``(lanes,)``, fp32) is given. ``op1`` other than COPY is applied to
    each fp32 result with ``scalar1`` (``(lanes,)``, fp32; required then). Without a
    reduction the result has one row per element; with one, one row per element flagged
    ``last`` (``last`` is a bool array of length ``elements``; an unterminated tail emits
    nothing). The rows are written in ``out_format``: ``"fp32"`` unchanged (bitwise results
    keep every bit), a narrow format cast with ``rounding``
    (:func:`sim.golden.convert.cast_output`; ``beat`` is the number of output beats since
    reset, whose generator words are used up). Stochastic
    rounding on an engine without a generator (``params.rng`` None) is refused, whatever the
    format (:func:`sim.golden.convert.check_rounding`).

    With ``scanning`` the engine runs a scan (:func:`scan`, one output row per element):
    ``op`` and ``op1`` its two operations, ``scalar`` the running value's initial value
    (zeros when None), each row of ``last`` a scan of its own.

    ``draw`` (:class:`~hdl.vector.ops.Draw`, element-wise only, on an engine with a
    generator) replaces each result row before its cast with the numbers :func:`uniform`
    makes of the lanes' words of those beats (``beat`` on), or, for a dropout, keeps a
    result where that number is at least the lane's ``scalar`` (the drop probability) and
    writes +0.0 elsewhere.
    """
    check_rounding(rounding, params.rng)
    a = widen_input(np.asarray(a, dtype=np.uint32).reshape(-1, params.lanes), in_format)
    reduce = Reduce(reduce)
    if scanning and reduce != Reduce.NONE:
        raise ValueError("a scan has no reduction")
    if scalar is not None and not scanning:
        b = np.broadcast_to(np.asarray(scalar, dtype=np.uint32), a.shape)
    elif b is None:
        b = np.zeros_like(a)
    else:
        b = widen_input(np.asarray(b, dtype=np.uint32).reshape(a.shape),
                        in_format if b_format is None else b_format)
    if scanning:
        starts = np.zeros(len(a), dtype=bool)
        starts[:1] = True
        if last is not None:
            starts[1:] = np.asarray(last, dtype=bool)[:-1]
        r = scan(op, op1, a, b, np.zeros(params.lanes, np.uint32) if scalar is None
                 else scalar, starts, reverse0, reverse1)
    else:
        r = elementwise(op, a, b)
        if VectorOp(op1) != VectorOp.COPY:
            if scalar1 is None:
                raise ValueError(f"op1 {VectorOp(op1).name} needs scalar1")
            r = elementwise(op1, r, np.asarray(scalar1, dtype=np.uint32))
        if reduce != Reduce.NONE:
            r = _reduce(params, r, reduce, last)
    draw = Draw(draw)
    if draw != Draw.NONE:
        if params.rng is None or reduce != Reduce.NONE or scanning:
            raise ValueError("a draw needs a generator and an element-wise operation")
        u = uniform(random_words(params.rng, params.seed, len(r), params.lanes, beat))
        if draw == Draw.UNIFORM:
            r = u
        else:
            prob = np.asarray(scalar, dtype=np.uint32).view(np.float32)
            r = np.where(u.view(np.float32) >= prob, r, np.uint32(0)).astype(np.uint32)
    if out_format == "fp32" or len(r) == 0:
        return r
    return cast_output(r, out_format, rounding, params.rng, params.seed, beat)


def uniform(words) -> np.ndarray:
    """The fp32 bits of ``(w >> 8) * 2**-24`` for each generator word ``w`` of ``words``:
    numbers uniform in [0, 1), exact (:func:`hdl.numerics.cast.uniform32`)."""
    top = np.asarray(words, dtype=np.uint32) >> np.uint32(8)
    return (top.astype(np.float32) * np.float32(2.0 ** -24)).view(np.uint32)


def _reduce(params, r, reduce, last) -> np.ndarray:
    last = np.zeros(len(r), dtype=bool) if last is None else np.asarray(last, dtype=bool)
    init = np.uint32(0) if reduce == Reduce.SUM else NEG_INF32
    step = add32 if reduce == Reduce.SUM else fmax
    acc = np.full(params.lanes, init, dtype=np.uint32)
    rows = []
    for e in range(len(r)):
        acc = step(acc, r[e])
        if last[e]:
            rows.append(acc)
            acc = np.full(params.lanes, init, dtype=np.uint32)
    return np.array(rows, dtype=np.uint32).reshape(-1, params.lanes)
