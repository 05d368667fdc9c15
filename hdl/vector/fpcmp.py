"""Combinational binary32 classification and comparison on bit patterns (IEEE semantics:
NaN is unordered, -0 == +0). Shared by the vector and activation engines."""

from amaranth.hdl import Mux

from hdl.numerics.constants import CANONICAL_NAN32

from .ops import VectorOp

#: The comparisons of :func:`holds`.
COMPARISONS = (VectorOp.IS_EQUAL, VectorOp.NOT_EQUAL, VectorOp.GREATER, VectorOp.GREATER_EQUAL,
               VectorOp.LESS, VectorOp.LESS_EQUAL)


def is_nan(a):
    return (a[23:31] == 0xFF) & (a[0:23] != 0)


def f_eq(a, b):
    """``a == b`` as fp32 values."""
    both_zero = (a[0:31] == 0) & (b[0:31] == 0)
    return ~is_nan(a) & ~is_nan(b) & ((a == b) | both_zero)


def f_lt(a, b):
    """``a < b`` as fp32 values."""
    both_zero = (a[0:31] == 0) & (b[0:31] == 0)
    sa, sb = a[31], b[31]
    ma, mb = a[0:31], b[0:31]
    lt = Mux(sa != sb, sa & ~both_zero, Mux(sa, ma > mb, ma < mb))
    return ~is_nan(a) & ~is_nan(b) & lt


def f_max(a, b):
    """The vector engine's max: canonical NaN if either is NaN, else ``b`` if ``b > a``."""
    return Mux(is_nan(a) | is_nan(b), CANONICAL_NAN32, Mux(f_lt(a, b), b, a))


def f_min(a, b):
    """The vector engine's min: canonical NaN if either is NaN, else ``b`` if ``b < a``."""
    return Mux(is_nan(a) | is_nan(b), CANONICAL_NAN32, Mux(f_lt(b, a), b, a))


def holds(op, a, b):
    """Whether the comparison ``op`` (one of :data:`COMPARISONS`) holds of the fp32 values
    ``a`` and ``b`` (combinational)."""
    lt, gt, eq = f_lt(a, b), f_lt(b, a), f_eq(a, b)
    out = eq
    for cmp, flag in ((VectorOp.NOT_EQUAL, ~eq), (VectorOp.GREATER, gt),
                      (VectorOp.GREATER_EQUAL, gt | eq), (VectorOp.LESS, lt),
                      (VectorOp.LESS_EQUAL, lt | eq)):
        out = Mux(op == cmp, flag, out)
    return out
