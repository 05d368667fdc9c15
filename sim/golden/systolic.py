"""Golden model of the tensor engine's systolic array: results bit for bit (its cycles, exactly:
:mod:`sim.golden.systolic_cycles`).

:func:`matmul` implements the numerics contract: ``dst = stationary.T @ moving`` with
``acc = add32(acc, mul32(a, b))`` summed over k = 0 .. K-1 from +0.0, then PSUM stores the
sum (overwrite) or ``add32(psum, sum)`` (accumulate); int8 accumulates in wrapping int32. The
float sum is a compiled (numba) kernel of float32 multiplies and adds in that fixed order,
without fast-math, so with no fused multiply-add, no reassociation and subnormals kept (binary32,
round-to-nearest-even); it vectorises across n only, where the outputs are independent. Every
NaN is made canonical (0x7FC00000) at the end (a NaN stays a NaN through both operations, so
that is the same as canonicalising each step). :func:`_sum_reference` is the same sum as numpy
passes over the whole M x N output, used when numba is missing and to check the kernel.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

try:
    import numba
except ImportError:  # the numpy passes below give the same bits, about 10x slower
    numba = None

from hdl.numerics.constants import CANONICAL_NAN32
from hdl.numerics.formats import (
    MX_FORMATS,
    IntFormat,
    MxFormat,
    format_by_name,
    input_format_by_name,
)

__all__ = ["matmul", "matmul_mx", "mx_values", "to_fp32", "transpose"]

CANONICAL_NAN = np.uint32(CANONICAL_NAN32)


def _format(fmt):
    return format_by_name(fmt) if isinstance(fmt, str) else fmt


@lru_cache(maxsize=64)
def _widen_table(fmt) -> np.ndarray:
    from sim.golden.numerics import widen

    codes = np.arange(1 << fmt.bits, dtype=np.uint32)
    return np.asarray(widen(codes, fmt), dtype=np.uint32).view(np.float32)


def to_fp32(bits, fmt) -> np.ndarray:
    """float32 values of ``fmt`` bit patterns (exact: every format widens into binary32).

    Formats of up to 19 bits go through a table of every code, made once per format by
    :func:`sim.golden.numerics.widen`; wider ones call it directly.
    """
    fmt = _format(fmt)
    bits = np.asarray(bits)
    if fmt.bits <= 19:
        if bits.dtype.kind != "u" or bits.dtype.itemsize > 4:
            bits = bits.astype(np.uint32)
        mask = min((1 << fmt.bits) - 1, np.iinfo(bits.dtype).max)
        return np.take(_widen_table(fmt), bits & bits.dtype.type(mask))
    from sim.golden.numerics import widen

    return np.asarray(widen(bits, fmt), dtype=np.uint32).view(np.float32)


def _int_values(bits, fmt: IntFormat) -> np.ndarray:
    raw = np.asarray(bits).astype(np.int64) & ((1 << fmt.bits) - 1)
    return np.where(raw >= 1 << (fmt.bits - 1), raw - (1 << fmt.bits), raw)


# The kernel sums blocks of 4 rows by 128 columns (2 KiB of accumulators, in L1), two k-steps
# per pass over the block: each accumulator is loaded and stored once for two ordered adds, each
# moving element loaded serves 4 rows, and the inner loop over n is long enough to vectorise.
_ROWS = 4
_BLOCK_N = 128


def _sum_reference(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``sum_k w[k, m] * x[k, n]`` as 2K numpy float32 passes over the M x N output."""
    acc = np.zeros((w.shape[1], x.shape[1]), dtype=np.float32)
    product = np.empty_like(acc)
    with np.errstate(all="ignore"):
        for k in range(w.shape[0]):
            np.multiply(w[k][:, None], x[k][None, :], out=product)
            np.add(acc, product, out=acc)
    return acc


def _sum_kernel(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The same sum: each output's k-loop in order, vectorised across a block of n only.

    ``r + a * v + b * u`` is ``(r + a * v) + b * u``: step k, then step k + 1, each rounded.
    """
    k_dim, m_dim = w.shape
    n_dim = x.shape[1]
    acc = np.zeros((m_dim, n_dim), dtype=np.float32)
    whole_m, whole_k = m_dim - m_dim % _ROWS, k_dim - k_dim % 2
    for n0 in range(0, n_dim, _BLOCK_N):
        n1 = min(n0 + _BLOCK_N, n_dim)
        for m in range(0, whole_m, _ROWS):
            r0, r1 = acc[m, n0:n1], acc[m + 1, n0:n1]
            r2, r3 = acc[m + 2, n0:n1], acc[m + 3, n0:n1]
            for k in range(0, whole_k, 2):
                a0, a1, a2, a3 = w[k, m], w[k, m + 1], w[k, m + 2], w[k, m + 3]
                b0, b1, b2, b3 = w[k + 1, m], w[k + 1, m + 1], w[k + 1, m + 2], w[k + 1, m + 3]
                xs, ys = x[k, n0:n1], x[k + 1, n0:n1]
                for j in range(n1 - n0):
                    v, u = xs[j], ys[j]
                    r0[j] = r0[j] + a0 * v + b0 * u
                    r1[j] = r1[j] + a1 * v + b1 * u
                    r2[j] = r2[j] + a2 * v + b2 * u
                    r3[j] = r3[j] + a3 * v + b3 * u
            for k in range(whole_k, k_dim):
                a0, a1, a2, a3 = w[k, m], w[k, m + 1], w[k, m + 2], w[k, m + 3]
                xs = x[k, n0:n1]
                for j in range(n1 - n0):
                    v = xs[j]
                    r0[j] = r0[j] + a0 * v
                    r1[j] = r1[j] + a1 * v
                    r2[j] = r2[j] + a2 * v
                    r3[j] = r3[j] + a3 * v
        for m in range(whole_m, m_dim):
            row = acc[m, n0:n1]
            for k in range(k_dim):
                a0 = w[k, m]
                xs = x[k, n0:n1]
                for j in range(n1 - n0):
                    row[j] = row[j] + a0 * xs[j]
    return acc


if numba is not None:
    _sum = numba.njit("float32[:, ::1](float32[:, ::1], float32[:, ::1])", fastmath=False,
                      cache=True, nogil=True)(_sum_kernel)
else:
    _sum = _sum_reference


def matmul(stationary, moving, fmt, psum=None, accumulate: bool = False,
           moving_fmt=None) -> np.ndarray:
    """The PSUM contents after one matmul, as uint32 bit patterns (M x N).

    Parameters
    ----------
    stationary : array (K, M) of ``fmt`` bit patterns
    moving : array (K, N) of ``moving_fmt`` bit patterns
    fmt : format name or descriptor (:mod:`hdl.numerics.formats`) of the stationary tile
    psum : array (M, N) of uint32 bit patterns, the bank before the matmul (accumulate only)
    accumulate : add the sum to ``psum`` instead of overwriting it
    moving_fmt : format of the moving tile, ``fmt`` when None; both float, or both int8
    """
    fmt = _format(fmt)
    mfmt = fmt if moving_fmt is None else _format(moving_fmt)
    stationary, moving = np.asarray(stationary), np.asarray(moving)
    if stationary.ndim != 2 or moving.ndim != 2 or stationary.shape[0] != moving.shape[0]:
        raise ValueError(f"stationary (K, M) and moving (K, N) must share K, not "
                         f"{stationary.shape} and {moving.shape}")
    if accumulate and psum is None:
        raise ValueError("psum must be given when accumulate is set, not None")
    if fmt.is_float != mfmt.is_float:
        raise ValueError(f"moving_fmt must be a float format with a float stationary and "
                         f"int8 with int8, not {mfmt.name!r} with {fmt.name!r}")
    if not fmt.is_float:
        total = _int_values(stationary, fmt).T @ _int_values(moving, fmt)  # exact in int64
        if accumulate:
            total = total + np.asarray(psum, dtype=np.uint32).view(np.int32)
        return (total & 0xFFFFFFFF).astype(np.uint32)
    acc = _sum(np.ascontiguousarray(to_fp32(stationary, fmt)),
               np.ascontiguousarray(to_fp32(moving, mfmt)))
    with np.errstate(all="ignore"):
        if accumulate:
            acc = np.add(np.asarray(psum, dtype=np.uint32).view(np.float32), acc)
    bits = acc.view(np.uint32)  # acc is this call's own array: canonicalise in place
    bits[np.isnan(acc)] = CANONICAL_NAN
    return bits


def transpose(stationary, fmt) -> np.ndarray:
    """The PSUM contents after the array's transpose pass of a K x M tile: the M x K
    transpose of its ``fmt`` bit patterns, uint32, each element's code in the low bits as
    it was loaded (no arithmetic: -0, NaN payloads and subnormals are kept). A double-rate
    format's tile gives its K contraction indices as K output rows, as any other; the
    block-scaled MX formats have no transpose (their scales belong to blocks along K)."""
    fmt = input_format_by_name(fmt) if isinstance(fmt, str) else fmt
    if isinstance(fmt, MxFormat):
        raise ValueError(f"fmt must not be a block-scaled MX format, not {fmt.name!r}")
    stationary = np.asarray(stationary)
    if stationary.ndim != 2:
        raise ValueError(f"stationary must be a (K, M) tile, not of shape {stationary.shape}")
    return np.ascontiguousarray(stationary.T.astype(np.uint32) & np.uint32((1 << fmt.bits) - 1))


# ---- block-scaled (MX) formats -------------------------------------------------------------

def mx_values(bits, fmt: MxFormat | str) -> np.ndarray:
    """float64 values of MX element codes (exact; NaN for NaN codes, infinities kept)."""
    fmt = MX_FORMATS[fmt] if isinstance(fmt, str) else fmt
    raw = np.asarray(bits).astype(np.int64) & ((1 << fmt.bits) - 1)
    sign = raw >> (fmt.bits - 1)
    exp = (raw >> fmt.man_bits) & ((1 << fmt.exp_bits) - 1)
    man = raw & ((1 << fmt.man_bits) - 1)
    scale = np.where(exp == 0, 1 - fmt.bias, exp - fmt.bias) - fmt.man_bits
    value = np.ldexp(np.where(exp == 0, man, man + (1 << fmt.man_bits)).astype(np.float64),
                     scale)
    top = (1 << fmt.exp_bits) - 1
    if fmt.nan == "ieee":
        value = np.where((exp == top) & (man == 0), np.inf, value)
        value = np.where((exp == top) & (man != 0), np.nan, value)
    elif fmt.nan == "fn":
        value = np.where((exp == top) & (man == (1 << fmt.man_bits) - 1), np.nan, value)
    return np.where(sign == 1, -value, value)


def matmul_mx(stationary, moving, fmt, stationary_scales, moving_scales, psum=None,
              accumulate: bool = False, moving_fmt=None) -> np.ndarray:
    """The PSUM contents after one block-scaled matmul, as uint32 bit patterns (M x N).

    Each product is the exact product of the two elements and their two scales, rounded once
    to binary32 (round-to-nearest-even, subnormals kept, overflow to infinity): the scales
    fold into the product's exponent, ``mul32`` with ``2**(sw + sx - 254)`` applied before
    its rounding; a NaN scale (255) makes its products NaN. The products are then summed as
    :func:`matmul` sums, ``add32`` in k order from +0.0, and PSUM stores or accumulates.

    Parameters
    ----------
    stationary, moving : arrays (K, M) and (K, N) of element codes of ``fmt``
    fmt : MX format name or :class:`~hdl.numerics.formats.MxFormat` (``"mxfp8"``, ``"mxfp4"``)
    stationary_scales, moving_scales : arrays (ceil(K / block), M) and (ceil(K / block), N)
        of E8M0 codes: row b scales contraction indices ``b * block .. (b + 1) * block - 1``
    psum, accumulate : as for :func:`matmul`
    moving_fmt : MX format of the moving tile, ``fmt`` when None (the same block size)
    """
    fmt = MX_FORMATS[fmt] if isinstance(fmt, str) else fmt
    mfmt = fmt if moving_fmt is None else (MX_FORMATS[moving_fmt]
                                           if isinstance(moving_fmt, str) else moving_fmt)
    if mfmt.block != fmt.block:
        raise ValueError(f"moving_fmt must have the block of {fmt.name!r} ({fmt.block}), "
                         f"not {mfmt.block}")
    stationary, moving = np.asarray(stationary), np.asarray(moving)
    sw, sx = np.asarray(stationary_scales), np.asarray(moving_scales)
    if stationary.ndim != 2 or moving.ndim != 2 or stationary.shape[0] != moving.shape[0]:
        raise ValueError(f"stationary (K, M) and moving (K, N) must share K, not "
                         f"{stationary.shape} and {moving.shape}")
    blocks = -(-stationary.shape[0] // fmt.block)
    for name, scales, tile in (("stationary_scales", sw, stationary),
                               ("moving_scales", sx, moving)):
        if scales.shape != (blocks, tile.shape[1]):
            raise ValueError(f"{name} must have shape {(blocks, tile.shape[1])} (one scale "
                             f"per {fmt.block} contraction indices and column), not "
                             f"{scales.shape}")
    if accumulate and psum is None:
        raise ValueError("psum must be given when accumulate is set, not None")
    # the elements' product is exact in binary32 (at most 8 significant bits, within its
    # normal range for every MX element format), so ldexp in binary32 rounds it once
    w, x = mx_values(stationary, fmt).astype(np.float32), mx_values(moving, mfmt).astype(np.float32)
    sw, sx = sw.astype(np.int32) & 0xFF, sx.astype(np.int32) & 0xFF
    acc = np.zeros((w.shape[1], x.shape[1]), np.float32)
    with np.errstate(all="ignore"):
        for k in range(w.shape[0]):
            b = k // fmt.block
            product = np.ldexp(w[k][:, None] * x[k][None, :],
                               sw[b][:, None] + sx[b][None, :] - 254)  # the one rounding, RNE
            product[(sw[b][:, None] == 255) | (sx[b][None, :] == 255)] = np.nan
            acc = acc + product
        if accumulate:
            acc = np.add(np.asarray(psum, dtype=np.uint32).view(np.float32), acc)
    bits = acc.view(np.uint32)
    bits[np.isnan(acc)] = CANONICAL_NAN
    return bits
