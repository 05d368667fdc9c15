"""The golden numerics model against independent references.

References: float64 arithmetic (binary32 +, * computed in binary64 and rounded once more to
binary32 are correctly rounded, as 53 >= 2*24 + 2), ml_dtypes for the formats it has, and
for tf32 and cFP8 a nearest-value search over a table of the format's values written here,
apart from the golden model's bit manipulation.
"""

import math

import ml_dtypes
import numpy as np
import pytest

from hdl.numerics.cast import CastParams, rng_initial_state
from hdl.numerics.formats import (
    BF16,
    FORMATS,
    FP8_E4M3,
    FP8_E4M3FN,
    FP8_E5M2,
    FP16,
    FP32,
    INT8,
    TF32,
    FloatFormat,
    cfp8,
    format_by_name,
    format_table,
)
from hdl.numerics.fpu import WidenParams
from sim.golden import numerics as golden

ML = {FP8_E4M3: ml_dtypes.float8_e4m3, FP8_E4M3FN: ml_dtypes.float8_e4m3fn,
      FP8_E5M2: ml_dtypes.float8_e5m2, BF16: ml_dtypes.bfloat16, FP16: np.float16}
CFP8 = [cfp8(11), cfp8(0), cfp8(-100), cfp8(147), cfp8(3, "e5m2"), cfp8(-60, "e5m2"),
        cfp8(146, "e5m2")]


def as_bits(values: np.ndarray) -> np.ndarray:
    return values.view(np.uint8 if values.dtype.itemsize == 1 else np.uint16).astype(np.int64)


def is_nan_bits(bits, fmt: FloatFormat) -> np.ndarray:
    return np.isnan(golden.decode(bits, fmt))


# -- binary32 arithmetic --------------------------------------------------------------------
def reference32(op, a_bits, b_bits):
    """Binary32 result bits from binary64 arithmetic rounded to binary32 (NaN -> None)."""
    with np.errstate(all="ignore"):
        a = a_bits.view(np.float32).astype(np.float64)
        b = b_bits.view(np.float32).astype(np.float64)
        return op(a, b).astype(np.float32)


@pytest.mark.parametrize("name,op", [("mul32", np.multiply), ("add32", np.add)])
def test_binary32_golden_matches_float64_reference(name, op, seed):
    rng = np.random.default_rng(seed)
    a, b = golden.edge_fp32_pairs(rng, 400_000)
    got = getattr(golden, name)(a, b)
    want = reference32(op, a, b)
    nan = np.isnan(want)
    assert np.array_equal(got[~nan], want[~nan].view(np.uint32))
    assert np.all(got[nan] == 0x7FC00000)
    assert nan.sum() > 1000 and (want == 0).sum() > 1000  # the edge classes are there
    tiny = np.abs(want) < np.float32(2.0**-126)
    assert (tiny & (want != 0)).sum() > 1000  # subnormal results


def test_binary32_golden_signed_zeros_and_specials():
    f = np.float32
    bits = np.array([0x3F800000, 0x80000000, 0x7F800000, 0x7FC00001, 0xFF800000],
                    dtype=np.uint32)
    one, nzero, inf, nan, ninf = bits
    add = golden.add32(bits[[0, 1, 2, 0]], np.array([0xBF800000, 0x80000000, 0xFF800000, nan],
                                                      dtype=np.uint32))
    assert list(add) == [0, 0x80000000, 0x7FC00000, 0x7FC00000]  # x + -x = +0, -0 + -0 = -0
    mul = golden.mul32(np.array([inf, nzero, ninf], dtype=np.uint32),
                       np.array([0, one, ninf], dtype=np.uint32))
    assert list(mul) == [0x7FC00000, 0x80000000, 0x7F800000]
    assert golden.mul32(f(3e38), f(10)) == np.inf  # float32 in, float32 out


# -- decode / widen ---------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", list(ML), ids=lambda f: f.name)
def test_decode_matches_ml_dtypes_on_every_pattern(fmt):
    bits = np.arange(1 << fmt.bits, dtype=np.int64)
    want = bits.astype(np.uint8 if fmt.bits == 8 else np.uint16).view(ML[fmt]).astype(
        np.float32)
    got = golden.decode(bits, fmt)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    wide = golden.widen(bits, fmt)
    assert np.all(wide[nan] == 0x7FC00000)


def reference_value(code: int, fmt: FloatFormat) -> float:
    """Value of a magnitude code, the exponent range read as unbounded (Python floats)."""
    exp, man = divmod(code, 2**fmt.man_bits)
    if exp == 0:
        return math.ldexp(man, 1 - fmt.bias - fmt.man_bits)
    return math.ldexp(1 + man / 2**fmt.man_bits, exp - fmt.bias)


@pytest.mark.parametrize("fmt", [TF32, *CFP8], ids=lambda f: f.name)
def test_decode_matches_reference_for_formats_without_ml_dtypes(fmt, seed):
    rng = np.random.default_rng(seed)
    codes = (np.arange(1 << fmt.bits) if fmt.bits <= 8
             else rng.integers(0, 1 << fmt.bits, 20_000))
    got = golden.decode(codes, fmt)
    top = 2**fmt.exp_bits - 1
    for code, value in zip(codes.tolist(), got.tolist(), strict=True):
        sign, mag = divmod(code, 2 ** (fmt.bits - 1))
        exp, man = divmod(mag, 2**fmt.man_bits)
        if exp == top:  # tf32 and cFP8 use the IEEE style
            assert (math.isnan(value) if man else value == (-1) ** sign * math.inf)
        else:
            assert value == (-1) ** sign * reference_value(mag, fmt)


def test_decode_int8():
    assert list(golden.decode(np.arange(256), INT8)[[0, 1, 127, 128, 255]]) == [0, 1, 127,
                                                                                  -128, -1]


# -- RNE casts --------------------------------------------------------------------------------
def compare_with_ml_dtypes(x: np.ndarray, fmt: FloatFormat):
    with np.errstate(all="ignore"):
        want = as_bits(x.astype(ML[fmt]))
    got = golden.cast_bits(x, fmt).astype(np.int64)
    nan = is_nan_bits(want, fmt)
    assert np.array_equal(got[~nan], want[~nan]), _first_diff(x, got, want, ~nan)
    assert np.all(is_nan_bits(got[nan], fmt))
    sign = 1 << (fmt.bits - 1)
    assert np.array_equal(got[nan] & sign, want[nan] & sign)


def _first_diff(x, got, want, where):
    n = np.flatnonzero(where & (got != want))[0]
    return f"x={x[n]!r} ({x.view(np.uint32)[n]:#x}): got {got[n]:#x}, want {want[n]:#x}"


@pytest.mark.parametrize("fmt", list(ML), ids=lambda f: f.name)
def test_rne_cast_round_trips_every_pattern(fmt):
    bits = np.arange(1 << fmt.bits, dtype=np.int64)
    values = golden.decode(bits, fmt)
    back = golden.cast_bits(values, fmt).astype(np.int64)
    nan = np.isnan(values)
    assert np.array_equal(back[~nan], bits[~nan])
    assert np.all(is_nan_bits(back[nan], fmt))
    compare_with_ml_dtypes(values, fmt)


@pytest.mark.parametrize("fmt", list(ML), ids=lambda f: f.name)
def test_rne_cast_matches_ml_dtypes(fmt, seed):
    rng = np.random.default_rng(seed)
    # every binary32 whose low 16 bits are 0x0000, 0x8000 (ties for bf16) or 0x7FFF / 0x8001
    high = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    lows = np.array([0, 0x8000, 0x7FFF, 0x8001], dtype=np.uint32)
    x = (high[:, None] | lows[None, :]).reshape(-1).view(np.float32)
    x = np.concatenate([x, golden.edge_fp32(rng, 500_000).view(np.float32),
                        golden.edge_fp32_for_format(fmt, rng, 500_000)])
    assert x.size >= 1_000_000
    compare_with_ml_dtypes(x, fmt)


def reference_rne(x: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Nearest value by search in a sorted table of the format's magnitudes, ties to the
    even code; the code after the largest finite one stands for overflow."""
    table = np.array([reference_value(c, fmt) for c in range(fmt.max_finite_bits + 2)])
    with np.errstate(invalid="ignore"):
        mag = np.abs(x.astype(np.float64))
    hi = np.clip(np.searchsorted(table, mag), 1, len(table) - 1)
    lo = hi - 1
    dlo, dhi = mag - table[lo], table[hi] - mag
    code = np.where((dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0)), hi, lo)
    code = np.where(mag >= table[-1], len(table) - 1, code)
    overflow = code > fmt.max_finite_bits
    code = np.where(overflow, fmt.inf_bits if fmt.has_inf else fmt.nan_bits, code)
    code = np.where(np.isnan(x), fmt.nan_bits, code)
    sign = np.signbit(x).astype(np.int64) << (fmt.bits - 1)
    return code | sign


@pytest.mark.parametrize("fmt", [TF32, *CFP8, *ML], ids=lambda f: f.name)
def test_rne_cast_matches_table_reference(fmt, seed):
    rng = np.random.default_rng(seed)
    x = np.concatenate([golden.edge_fp32(rng, 100_000).view(np.float32),
                        golden.edge_fp32_for_format(fmt, rng, 200_000)])
    got = golden.cast_bits(x, fmt).astype(np.int64)
    want = reference_rne(x, fmt)
    assert np.array_equal(got, want), _first_diff(x, got, want, np.ones(len(x), bool))


# -- stochastic rounding --------------------------------------------------------------------
def reference_words(rng: str, state: tuple[int, ...], count: int) -> list[int]:
    """The generators, one bit-serial step at a time, written apart from the golden model."""
    out = []
    if rng == "lfsr32":
        (s,) = state
        for _ in range(count):
            for _ in range(32):
                feedback = s & 1
                s >>= 1
                if feedback:  # taps 32, 22, 2, 1
                    s ^= (1 << 31) | (1 << 21) | (1 << 1) | 1
            out.append(s)
        return out
    x, y, z, w, v, d = state
    for _ in range(count):
        t = (x ^ (x >> 2)) & 0xFFFFFFFF
        x, y, z, w = y, z, w, v
        v = (v ^ (v << 4) ^ t ^ (t << 1)) & 0xFFFFFFFF
        d = (d + 362437) & 0xFFFFFFFF
        out.append((v + d) & 0xFFFFFFFF)
    return out


@pytest.mark.parametrize("rng", ["xorwow", "lfsr32"])
def test_random_words_follow_the_recurrence(rng):
    words = golden.random_words(rng, 99, 500, 3)
    for lane in range(3):
        want = reference_words(rng, rng_initial_state(rng, 99, lane), 500)
        assert words[:, lane].tolist() == want
    assert len(set(words[0].tolist())) == 3  # lanes differ


@pytest.mark.parametrize("rng", ["xorwow", "lfsr32"])
@pytest.mark.parametrize("start", [1, 31, 32, 257, 4999])
def test_random_words_jump_to_any_beat(rng, start):
    """The words from beat ``start`` on (the state jumped by its matrix powers) are the
    recurrence's, stepped from the seeding."""
    words = golden.random_words(rng, 5, 40, 2, start=start)
    for lane in range(2):
        want = reference_words(rng, rng_initial_state(rng, 5, lane), start + 40)[start:]
        assert words[:, lane].tolist() == want


def ulp_below(x: np.ndarray, fmt: FloatFormat):
    """The neighbours lo <= |x| < hi on fmt's grid, from the table reference."""
    table = np.array([reference_value(c, fmt) for c in range(fmt.max_finite_bits + 2)])
    mag = np.abs(x.astype(np.float64))
    hi = np.searchsorted(table, mag, side="right")
    return table[hi - 1], table[hi]


@pytest.mark.parametrize("fmt,rng", [(BF16, "xorwow"), (FP8_E4M3, "lfsr32"),
                                     (FP16, "xorwow"), (cfp8(20, "e5m2"), "lfsr32")],
                         ids=lambda v: getattr(v, "name", v))
def test_stochastic_rounding_is_unbiased_where_rne_is_not(fmt, rng, seed):
    """Values whose position between neighbours is uniform on [0, 0.45): RNE always rounds
    down (mean error about -0.22 ulp); stochastic rounding's mean error is within 5 standard
    errors of zero over 10**6 samples, and the probability of rounding up is the position."""
    gen = np.random.default_rng(seed)
    n = 1_000_000
    codes = gen.integers(1, fmt.max_finite_bits, n)
    if fmt.bits > 8:  # stay within the normal range of the target and away from overflow
        codes = gen.integers(fmt.max_finite_bits // 4, fmt.max_finite_bits // 2, n)
    lo = np.array([reference_value(c, fmt) for c in range(fmt.max_finite_bits + 2)])[codes]
    hi = np.array([reference_value(c + 1, fmt) for c in range(fmt.max_finite_bits + 2)])[codes]
    x = (lo + gen.random(n) * 0.45 * (hi - lo)).astype(np.float32)
    lo, hi = ulp_below(x, fmt)
    pos = (x.astype(np.float64) - lo) / (hi - lo)
    lanes = 1000
    got = golden.decode(golden.cast_bits(x.reshape(-1, lanes), fmt, "stochastic", seed=seed,
                                         rng=rng).reshape(-1), fmt).astype(np.float64)
    rne = golden.decode(golden.cast_bits(x, fmt), fmt).astype(np.float64)
    err = (got - x) / (hi - lo)
    err_rne = (rne - x) / (hi - lo)
    se = err.std() / math.sqrt(n)
    assert abs(err.mean()) < 5 * se, (err.mean(), se)
    assert err_rne.mean() < -0.2 and abs(err_rne.mean()) > 100 * se  # RNE's bias, measured
    up = got == hi
    assert np.all(up | (got == lo))
    # P(up | position) = position: compare in 10 bins of the position
    bins = np.minimum((pos / 0.045).astype(int), 9)
    for b in range(10):
        sel = bins == b
        p = pos[sel].mean()
        assert abs(up[sel].mean() - p) < 5 * math.sqrt(p * (1 - p) / sel.sum()), b


@pytest.mark.parametrize("fmt", [FP8_E5M2, BF16], ids=lambda f: f.name)
def test_stochastic_rounding_on_the_subnormal_grid(fmt, seed):
    """Below the smallest normal, rounding goes to the subnormal grid with P(up) = position."""
    gen = np.random.default_rng(seed)
    n = 200_000
    position = 0.3
    x = np.full(n, (3 + position) * fmt.min_subnormal, dtype=np.float32)
    got = golden.decode(golden.cast_bits(x.reshape(-1, 100), fmt, "stochastic",
                                         seed=int(gen.integers(2**32))).reshape(-1), fmt)
    up = got == np.float32(4 * fmt.min_subnormal)
    assert np.all(up | (got == np.float32(3 * fmt.min_subnormal)))
    assert abs(up.mean() - position) < 5 * math.sqrt(position * (1 - position) / n)


def test_stochastic_rounding_is_reproducible_from_its_seed():
    x = golden.edge_fp32_for_format(BF16, np.random.default_rng(1), 40_000).reshape(-1, 8)
    a = golden.cast_bits(x, BF16, "stochastic", seed=5)
    assert np.array_equal(a, golden.cast_bits(x, BF16, "stochastic", seed=5))
    assert not np.array_equal(a, golden.cast_bits(x, BF16, "stochastic", seed=6))
    # exactly representable values and specials are never perturbed
    exact = golden.decode(np.arange(1 << 16), BF16).reshape(-1, 16)
    out = golden.cast_bits(exact, BF16, "stochastic", seed=5).astype(np.int64)
    nan = np.isnan(exact)
    assert np.array_equal(out[~nan], np.arange(1 << 16).reshape(-1, 16)[~nan])


def test_stochastic_overflow_follows_rne_rules():
    big = np.full((1000, 4), 460.0, dtype=np.float32)  # between 448 and 480 in e4m3fn
    out = golden.cast_bits(big, FP8_E4M3FN, "stochastic", seed=1)
    assert set(np.unique(out).tolist()) == {0x7E, 0x7F}  # 448 or NaN
    out = golden.cast_bits(-big / 2, FP8_E4M3, "stochastic", seed=1)  # 230: 224 or 240
    assert set(np.unique(out).tolist()) == {0xF6, 0xF7}
    out = golden.cast_bits(np.full((100, 4), 250.0, np.float32), FP8_E4M3, "stochastic")
    assert set(np.unique(out).tolist()) == {0x77, 0x78}  # 240 or inf


def test_cast_returns_ml_dtypes_arrays_where_they_exist():
    x = np.array([1.0, 3.0, -0.5], dtype=np.float32)
    assert golden.cast(x, BF16).dtype == ml_dtypes.bfloat16
    assert golden.cast(x, FP16).dtype == np.float16
    assert golden.cast(x, TF32).dtype == np.uint32
    assert list(golden.decode(golden.cast(x, cfp8(3)), cfp8(3))) == [1.0, 3.0, -0.5]


# -- formats -------------------------------------------------------------------------------
def test_format_figures_match_ml_dtypes():
    for fmt, dtype in ML.items():
        info = ml_dtypes.finfo(dtype)
        assert fmt.max_finite == float(info.max)
        assert fmt.min_normal == float(info.smallest_normal)
        assert fmt.min_subnormal == float(info.smallest_subnormal)
    assert FP8_E4M3.max_finite == 240 and FP8_E4M3FN.max_finite == 448
    assert TF32.bits == 19 and TF32.max_finite == float(np.finfo(np.float32).max) - 2.0**104 * (
        2**13 - 1)
    assert FP32.min_subnormal == 2.0**-149


def test_format_table_rows():
    rows = format_table(list(FORMATS.values()) + ["cfp8_e5m2_b-3"])
    by_name = {r["name"]: r for r in rows}
    assert by_name["fp8_e4m3fn"] == {
        "name": "fp8_e4m3fn", "bits": 8, "exponent_bits": 4, "mantissa_bits": 3, "bias": 7,
        "max_finite": 448.0, "min_normal": 2.0**-6, "min_subnormal": 2.0**-9,
        "infinities": False, "nan_encoding": "exponent and mantissa all ones"}
    assert by_name["cfp8_e5m2_b-3"]["max_finite"] == 1.75 * 2.0**33
    assert by_name["int8"]["max_finite"] == 127 and by_name["int8"]["bits"] == 8


def test_format_lookup_and_errors():
    assert format_by_name("bf16") is BF16
    assert format_by_name("cfp8_e4m3_b11") == cfp8(11)
    with pytest.raises(ValueError, match=r"format must be one of fp8_e4m3, .*cfp8_e4m3_b<bias>"
                                         r".*, not 'fp8'"):
        format_by_name("fp8")
    with pytest.raises(ValueError, match=r"bias must be at least -113 .* not -114"):
        cfp8(-114)
    with pytest.raises(ValueError, match=r"bias must be at most 147 .* not 148"):
        cfp8(148)
    with pytest.raises(ValueError, match=r"layout must be one of 'e4m3', 'e5m2', not 'e3m4'"):
        cfp8(7, "e3m4")
    with pytest.raises(ValueError, match=r"has_inf must be False for NaN style 'fn', not True"):
        FloatFormat(name="x", exp_bits=4, man_bits=3, bias=7, has_inf=True, nan="fn")
    with pytest.raises(ValueError, match=r"nan must be one of 'ieee', 'fn', not 'x'"):
        FloatFormat(name="x", exp_bits=4, man_bits=3, bias=7, has_inf=True, nan="x")
    with pytest.raises(ValueError, match=r"exp_bits must be an integer in \[2, 8\], not 9"):
        FloatFormat(name="x", exp_bits=9, man_bits=3, bias=7, has_inf=True, nan="ieee")


def test_parameter_errors():
    with pytest.raises(ValueError, match=r"fmt must be a FloatFormat narrower than fp32"):
        CastParams(fmt=FP32)
    with pytest.raises(ValueError, match=r"rounding must be one of 'rne', 'stochastic', "
                                         r"not 'rtz'"):
        CastParams(fmt=BF16, rounding="rtz")
    with pytest.raises(ValueError, match=r"rng must be one of 'xorwow', 'lfsr32', not 'mt'"):
        CastParams(fmt=BF16, rng="mt")
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*32\), not -1"):
        CastParams(fmt=BF16, seed=-1)
    with pytest.raises(ValueError, match=r"lanes must be a positive integer, not 0"):
        CastParams(fmt=BF16, lanes=0)
    with pytest.raises(ValueError, match=r"fmt must be a FloatFormat or IntFormat, not 'bf16'"):
        WidenParams(fmt="bf16")
