"""Golden model of the numerics contract: binary32 arithmetic, widening and casts.

* :func:`mul32`, :func:`add32`: numpy float32 arithmetic (IEEE round-to-nearest-even, no
  flushing on numpy's default floating-point environment) with every NaN output replaced by
  the canonical ``0x7FC00000``. Float32 arrays in, float32 out; uint32 bit patterns in,
  uint32 bit patterns out.
* :func:`decode` / :func:`encode`: bit patterns of any format <-> float32 values
  (``encode`` rounds to nearest even, it is :func:`cast_bits` with ``rounding="rne"``).
* :func:`widen`: bit patterns of any format -> binary32 bit patterns (canonical NaN).
* :func:`cast_bits` / :func:`cast`: float32 -> a narrower float format, round-to-nearest-even
  or stochastic, mirroring :class:`hdl.numerics.cast.Cast` bit for bit.
  :func:`cast` returns an ``ml_dtypes`` (or ``np.float16``) array for formats that have one
  (fp8_e4m3, fp8_e4m3fn, fp8_e5m2, bf16, fp16) and the bit patterns (uint8 / uint32) for the
  others (tf32, cfp8_*), which :func:`decode` turns into float32 values.
* :func:`random_words`: the per-lane random generators of the stochastic cast.
"""

from __future__ import annotations

import numpy as np

from hdl.numerics.cast import (
    LFSR_TAPS,
    RNGS,
    ROUNDINGS,
    XORWOW_WEYL,
    CastParams,
    rng_initial_state,
)
from hdl.numerics.constants import CANONICAL_NAN32, SIGN32
from hdl.numerics.dtypes import ML_DTYPES
from hdl.numerics.formats import FP32, FloatFormat, IntFormat, format_table

__all__ = [
    "add32",
    "cast",
    "cast_bits",
    "cast_params",
    "decode",
    "edge_fp32",
    "edge_fp32_for_format",
    "edge_fp32_pairs",
    "encode",
    "format_table",
    "ml_dtype",
    "mul32",
    "random_words",
    "widen",
]



def ml_dtype(fmt: FloatFormat):
    """The numpy / ml_dtypes dtype of ``fmt``, or None (tf32, cfp8_*)."""
    return ML_DTYPES.get(fmt.name)


def _canonical(result: np.ndarray) -> np.ndarray:
    bits = result.view(np.uint32).copy()
    bits[np.isnan(result)] = CANONICAL_NAN32
    return bits


def _binary32(op, a, b):
    a, b = np.asarray(a), np.asarray(b)
    as_bits = a.dtype == np.uint32
    fa = a.view(np.float32) if as_bits else a.astype(np.float32)
    fb = b.view(np.float32) if b.dtype == np.uint32 else b.astype(np.float32)
    with np.errstate(all="ignore"):
        bits = _canonical(np.asarray(op(fa, fb), dtype=np.float32))
    return bits if as_bits else bits.view(np.float32)


def mul32(a, b):
    """``a * b`` in binary32, canonical NaN (bit patterns if ``a`` is uint32)."""
    return _binary32(np.multiply, a, b)


def add32(a, b):
    """``a + b`` in binary32, canonical NaN (bit patterns if ``a`` is uint32)."""
    return _binary32(np.add, a, b)


def _fields(bits, fmt: FloatFormat):
    bits = np.asarray(bits).astype(np.int64)
    sign = (bits >> (fmt.bits - 1)) & 1
    exp = (bits >> fmt.man_bits) & ((1 << fmt.exp_bits) - 1)
    man = bits & ((1 << fmt.man_bits) - 1)
    top = (1 << fmt.exp_bits) - 1
    if fmt.nan == "ieee":
        nan = (exp == top) & (man != 0)
        inf = (exp == top) & (man == 0)
    else:
        nan = (exp == top) & (man == (1 << fmt.man_bits) - 1)
        inf = np.zeros_like(nan)
    return sign, exp, man, nan, inf


def decode(bits, fmt: FloatFormat | IntFormat) -> np.ndarray:
    """Float32 values of bit patterns of ``fmt`` (exact; NaN payloads are not kept)."""
    if isinstance(fmt, IntFormat):
        raw = np.asarray(bits).astype(np.int64) & ((1 << fmt.bits) - 1)
        return np.where(raw >= 1 << (fmt.bits - 1), raw - (1 << fmt.bits), raw).astype(
            np.float32)
    sign, exp, man, nan, inf = _fields(bits, fmt)
    scale = np.where(exp == 0, fmt.emin, exp - fmt.bias) - fmt.man_bits
    sig = np.where(exp == 0, man, man + (1 << fmt.man_bits)).astype(np.float64)
    value = np.ldexp(sig, scale)
    value = np.where(inf, np.inf, value)
    value = np.where(nan, np.nan, value)
    return np.where(sign == 1, -value, value).astype(np.float32)


def widen(bits, fmt: FloatFormat | IntFormat) -> np.ndarray:
    """Binary32 bit patterns (uint32) of ``fmt`` bit patterns; every NaN is 0x7FC00000."""
    return _canonical(decode(bits, fmt))


def _bit_length(values: np.ndarray) -> np.ndarray:
    """Bit length of positive integers below 2**53."""
    return np.frexp(values.astype(np.float64))[1].astype(np.int64)


def random_words(rng: str, seed: int, beats: int, lanes: int, start: int = 0) -> np.ndarray:
    """The ``(beats, lanes)`` uint32 words the generator of each lane gives, one per beat,
    from beat ``start`` on (the words of beats ``start`` .. ``start + beats - 1`` since the
    seeding; the state jumps over the first ``start``, :func:`_jump`).

    Each beat first advances the state, then reads the output (see
    :class:`hdl.numerics.cast.Cast` for the recurrences and the seeding).
    """
    if rng not in RNGS:
        raise ValueError(f"rng must be one of {', '.join(map(repr, RNGS))}, not {rng!r}")
    states = np.array([rng_initial_state(rng, seed, lane) for lane in range(lanes)],
                      dtype=np.uint32).reshape(lanes, -1)
    if start:
        states = _jump(rng, states, start)
    out = np.empty((beats, lanes), dtype=np.uint32)
    if rng == "lfsr32":
        tables = _lfsr_leap_tables()
        s = states[:, 0].copy()
        for n in range(beats):
            s = _lfsr_leap(tables, s)
            out[n] = s
        return out
    x, y, z, w, v, d = (states[:, i].copy() for i in range(6))
    weyl = np.uint32(XORWOW_WEYL)
    with np.errstate(over="ignore"):
        for n in range(beats):
            x, y, z, w, v = _xorshift(x, y, z, w, v)
            d = d + weyl
            out[n] = v + d
    return out


def _lfsr_leap(tables, s):
    return (tables[0][s & 0xFF] ^ tables[1][(s >> 8) & 0xFF] ^ tables[2][(s >> 16) & 0xFF]
            ^ tables[3][s >> 24])


def _xorshift(x, y, z, w, v):
    """One beat of xorwow's xorshift part (linear over GF(2); the Weyl counter apart)."""
    t = x ^ (x >> np.uint32(2))
    return y, z, w, v, (v ^ (v << np.uint32(4))) ^ (t ^ (t << np.uint32(1)))


#: Per generator, the bit matrices of its linear part over 1, 2, 4, ... beats.
_POWERS: dict[str, list[np.ndarray]] = {}


def _linear_words(rng: str) -> int:
    """The 32-bit state words of the generator's linear part."""
    return 1 if rng == "lfsr32" else 5


def _linear_step(rng: str, words: np.ndarray) -> np.ndarray:
    """One beat of the linear part on states ``(lanes, words)``."""
    if rng == "lfsr32":
        return _lfsr_leap(_lfsr_leap_tables(), words[:, 0])[:, None]
    return np.stack(_xorshift(*(words[:, i] for i in range(5))), axis=1)


def _to_bits(words: np.ndarray) -> np.ndarray:
    """``(lanes, k)`` uint32 words as ``(lanes, 32 k)`` bits, bit ``b`` of word ``i`` at
    ``32 i + b``."""
    return ((words[:, :, None] >> np.arange(32, dtype=np.uint32)) & 1).reshape(
        len(words), -1).astype(np.int64)


def _from_bits(bits: np.ndarray) -> np.ndarray:
    weights = np.uint64(1) << np.arange(32, dtype=np.uint64)
    return (bits.reshape(len(bits), -1, 32).astype(np.uint64) * weights).sum(
        axis=2).astype(np.uint32)


def _power(rng: str, j: int) -> np.ndarray:
    """The bit matrix ``M`` of ``2**j`` beats of the linear part: ``bits' = bits @ M``
    (mod 2)."""
    powers = _POWERS.setdefault(rng, [])
    if not powers:
        n = 32 * _linear_words(rng)
        basis = _from_bits(np.eye(n, dtype=np.int64))  # state i: bit i alone
        powers.append(_to_bits(_linear_step(rng, basis)))
    while len(powers) <= j:
        powers.append((powers[-1] @ powers[-1]) & 1)
    return powers[j]


def _jump(rng: str, states: np.ndarray, beats: int) -> np.ndarray:
    """``states`` (``(lanes, words)``, :func:`rng_initial_state` each) after ``beats``
    beats: the linear part by its matrix powers (GF(2)), xorwow's Weyl counter by
    ``beats`` times its increment."""
    k = _linear_words(rng)
    bits = _to_bits(states[:, :k])
    for j in range(beats.bit_length()):
        if beats >> j & 1:
            bits = (bits @ _power(rng, j)) & 1
    out = states.copy()
    out[:, :k] = _from_bits(bits)
    if rng == "xorwow":
        out[:, 5] = (out[:, 5].astype(np.uint64) + beats * XORWOW_WEYL % 2**32) % 2**32
    return out


_LFSR_TABLES: list[np.ndarray] = []


def _lfsr_step32(state: int) -> int:
    for _ in range(32):
        state = (state >> 1) ^ (LFSR_TAPS if state & 1 else 0)
    return state


def _lfsr_leap_tables() -> list[np.ndarray]:
    """32 LFSR steps as four byte-indexed tables (the leap is linear over GF(2))."""
    if not _LFSR_TABLES:
        for k in range(4):
            _LFSR_TABLES.append(np.array([_lfsr_step32(b << (8 * k)) for b in range(256)],
                                         dtype=np.uint32))
    return _LFSR_TABLES


def cast_params(params: CastParams):
    """The arguments of :func:`cast_bits` that a :class:`CastParams` fixes."""
    return {"fmt": params.fmt, "rounding": params.rounding, "seed": params.seed,
            "rng": params.rng}


def cast_bits(x, fmt: FloatFormat, rounding: str = "rne", seed: int | None = None,
              rng: str = "xorwow", start: int = 0) -> np.ndarray:
    """Bit patterns of float32 ``x`` cast to ``fmt`` (uint8 up to 8 bits, else uint32).

    ``rounding="rne"``: round to nearest, ties to even; a magnitude that rounds above the
    largest finite value becomes infinity, or NaN in ``fn`` formats (as ml_dtypes does).
    ``rounding="stochastic"``: see :class:`hdl.numerics.cast.Cast`. ``x`` is then read as
    ``(beats, lanes)`` (a 1-d array is one lane), and lane ``l`` draws the words of
    ``random_words(rng, seed, beats, lanes, start)[:, l]``: the generators' words from beat
    ``start`` since their seeding on. ``seed`` defaults to 0.
    Infinities stay infinities (NaN in ``fn`` formats); NaN becomes the format's canonical
    NaN with the input's sign.
    """
    if not isinstance(fmt, FloatFormat) or fmt.man_bits >= FP32.man_bits:
        raise ValueError(f"fmt must be a FloatFormat narrower than fp32, not {fmt!r}")
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {', '.join(map(repr, ROUNDINGS))}, "
                         f"not {rounding!r}")
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.int64)
    sign = bits >> 31
    exp32 = (bits >> 23) & 0xFF
    sig = np.where(exp32 > 0, (bits & 0x7FFFFF) | (1 << 23), bits & 0x7FFFFF)
    e2 = np.maximum(exp32, 1) - 150  # |x| = sig * 2**e2
    nonzero = sig > 0
    lead = e2 + _bit_length(np.where(nonzero, sig, 1)) - 1
    man = fmt.man_bits
    k = np.maximum(lead, fmt.emin) - man  # exponent of the target's last kept bit
    shift = k - e2
    right = np.clip(shift, 0, 62)
    q = np.where(shift > 0, sig >> right, sig << np.clip(-shift, 0, 62))
    rem = np.where(shift > 0, sig & ((np.int64(1) << right) - 1), 0)
    if rounding == "rne":
        half = np.where(right > 0, np.int64(1) << np.maximum(right - 1, 0), 1)
        up = (shift > 0) & ((rem > half) | ((rem == half) & ((q & 1) == 1)))
    else:
        drop = FP32.man_bits - man
        frac = (rem << drop) >> right
        words = random_words(rng, 0 if seed is None else seed,
                             *(x.shape if x.ndim == 2 else (x.size, 1)), start).reshape(x.shape)
        rand = words.astype(np.int64) >> (32 - drop)
        up = (shift > 0) & (frac + rand >= (1 << drop))
    q = q + up
    carry = q >> (man + 1) > 0
    q = np.where(carry, q >> 1, q)
    k = k + carry
    normal = q >= (1 << man)
    field = np.where(normal, k + man + fmt.bias, 0)
    mag = np.where(normal, (field << man) | (q - (1 << man)), q)
    overflow_bits = fmt.inf_bits if fmt.has_inf else fmt.nan_bits
    mag = np.where(mag > fmt.max_finite_bits, overflow_bits, mag)
    mag = np.where(nonzero, mag, 0)
    mag = np.where(exp32 == 0xFF, np.where((bits & 0x7FFFFF) == 0, overflow_bits,
                                           fmt.nan_bits), mag)
    out = (sign << (fmt.bits - 1)) | mag
    return out.astype(np.uint8 if fmt.bits <= 8 else np.uint32)


def cast(x, fmt: FloatFormat, rounding: str = "rne", seed: int | None = None,
         rng: str = "xorwow") -> np.ndarray:
    """:func:`cast_bits` as an ml_dtypes / float16 array where the format has a dtype,
    otherwise the bit patterns (decode them with :func:`decode`)."""
    bits = cast_bits(x, fmt, rounding, seed, rng)
    dtype = ml_dtype(fmt)
    if dtype is None:
        return bits
    return bits.astype(np.uint16).view(dtype) if fmt.bits == 16 else bits.view(dtype)


def encode(x, fmt: FloatFormat) -> np.ndarray:
    """Bit patterns of float32 ``x`` in ``fmt``, rounded to nearest even."""
    if fmt == FP32:
        return _canonical(np.asarray(x, dtype=np.float32))
    return cast_bits(x, fmt, "rne")


def edge_fp32(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` binary32 bit patterns (uint32) biased to the edge classes: signed zeros,
    subnormals, the smallest normals, near-overflow, infinities, NaNs (quiet and
    signalling), short mantissas (which make exact ties in sums, products and casts), and
    uniformly random patterns."""
    cls = rng.integers(0, 9, n)
    sign = rng.integers(0, 2, n) << 31
    man = rng.integers(0, 1 << 23, n)
    keep = rng.integers(0, 24, n)
    short = (man & ~((1 << (23 - keep)) - 1)) | (rng.integers(0, 2, n) << rng.integers(0, 23, n))
    exp = np.select(
        [cls == 0, cls == 1, cls == 2, cls == 3, cls == 4, cls == 5, cls == 6],
        [0, 0, rng.integers(1, 4, n), rng.integers(250, 255, n), 255, 255,
         rng.integers(100, 160, n)], rng.integers(0, 256, n))
    man = np.select([cls == 0, cls == 4, cls == 5, cls == 6, cls == 7],
                    [0, 0, man | 1, short, short], man) & 0x7FFFFF
    return (sign | (exp << 23) | man).astype(np.uint32)


def edge_fp32_pairs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Operand pairs for binary32 add and multiply: :func:`edge_fp32` values, with half of
    the ``b`` exponents placed within 30 of ``a``'s (alignment, cancellation and sticky
    cases of addition; products near the subnormal and overflow edges) and some ``b = -a``."""
    a = edge_fp32(rng, n)
    b = edge_fp32(rng, n)
    near = rng.integers(0, 2, n).astype(bool)
    ea = ((a >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)
    eb = np.clip(ea + rng.integers(-30, 31, n), 0, 254).astype(np.uint32)
    b = np.where(near, (b & np.uint32(0x807FFFFF)) | (eb << np.uint32(23)), b)
    negate = rng.integers(0, 16, n) == 0
    b = np.where(negate, a ^ np.uint32(SIGN32), b)
    return a.astype(np.uint32), b.astype(np.uint32)


def _grid_value(mag: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Float64 value of magnitude codes of ``fmt`` read as if the exponent range went on
    (so the code after the largest finite value is the next grid point, not inf/NaN)."""
    mag = np.asarray(mag, dtype=np.int64)
    exp, man = mag >> fmt.man_bits, mag & ((1 << fmt.man_bits) - 1)
    sig = np.where(exp == 0, man, man + (1 << fmt.man_bits)).astype(np.float64)
    return np.ldexp(sig, np.where(exp == 0, fmt.emin, exp - fmt.bias) - fmt.man_bits)


def edge_fp32_for_format(fmt: FloatFormat, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` float32 values for casts to ``fmt``: a quarter :func:`edge_fp32`, the rest
    values of ``fmt``'s grid, exact midpoints between neighbours (ties) and their float32
    neighbours, and random points between neighbours, signs random. For formats of 8 bits
    or fewer, every grid value and every midpoint come first (the total stays ``n``)."""
    top = (fmt.max_finite_bits + 1).bit_length()
    mags = rng.integers(0, min(fmt.max_finite_bits + 1, 1 << top), n)
    if fmt.bits <= 8:
        every = np.arange(fmt.max_finite_bits + 1)
        mags = np.concatenate([every, every, mags])[:n]
    lo, hi = _grid_value(mags, fmt), _grid_value(mags + 1, fmt)
    mid = (lo + hi) / 2
    kind = rng.integers(0, 6, n)
    if fmt.bits <= 8:
        kind[:fmt.max_finite_bits + 1] = 0
        kind[fmt.max_finite_bits + 1:2 * (fmt.max_finite_bits + 1)] = 1
    with np.errstate(over="ignore"):
        mid32 = mid.astype(np.float32)
        value = np.select(
            [kind == 0, kind == 1, kind == 2, kind == 3, kind == 4],
            [lo.astype(np.float32), mid32, np.nextafter(mid32, np.float32(0)),
             np.nextafter(mid32, np.float32(np.inf)),
             (lo + rng.random(n) * (hi - lo)).astype(np.float32)],
            edge_fp32(rng, n).view(np.float32))
    sign = rng.integers(0, 2, n).astype(bool)
    return np.where(sign, -value, value).astype(np.float32)
