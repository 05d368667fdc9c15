"""Accuracy of the activation functions against independent references (numpy, scipy in
float64), out-of-range rules, and the fitting's determinism."""

import math

import numpy as np
import pytest
from scipy import special

from generators.units import scalar_datasheet
from generators.vector import accuracy_table
from hdl.params import accuracy_bounds
from hdl.vector.fitting import activation_table, fit_function, rom_words
from hdl.vector.functions import DEFAULT_FUNCTIONS, FunctionSpec
from sim.golden.activation import evaluate
from specs.loader import load

# The references, written apart from the generator's table.
REFERENCE = {
    "identity": lambda x: x,
    "relu": lambda x: np.where(x > 0, x, 0.0),
    "exp": np.exp,
    "gelu": lambda x: 0.5 * x * special.erfc(-x / math.sqrt(2.0)),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "softplus": lambda x: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0),
    "erf": special.erf,
    "reciprocal": np.reciprocal,
    "rsqrt": lambda x: np.sqrt(1.0 / x),
    "sqrt": np.sqrt,
    "log": np.log,
    "square": lambda x: x * x,
    "abs": np.abs,
    "mish": lambda x: x * np.tanh(np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0)),
    "gelu_tanh": lambda x: x / (1.0 + np.exp(-2.0 * math.sqrt(2.0 / math.pi)
                                             * (x + 0.044715 * x**3))),
    "sin": np.sin,
    "cos": np.cos,
    "arctan": lambda x: np.arctan2(x, 1.0),
    "gelu_sigmoid": lambda x: x / (1.0 + np.exp(-1.702 * x)),
    "silu_dx": lambda x: (1.0 + x / (1.0 + np.exp(x))) / (1.0 + np.exp(-x)),
    "gelu_sigmoid_dx": lambda x: (1.0 + 1.702 * x / (1.0 + np.exp(1.702 * x)))
    / (1.0 + np.exp(-1.702 * x)),
    "gelu_dx": lambda x: 0.5 * special.erfc(-x / math.sqrt(2.0))
    + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi),
    "erf_dx": lambda x: 2.0 / math.sqrt(math.pi) * np.exp(-x * x),
}

# Maximum relative error |y - f| / |f| asserted wherever the exact result is a normal fp32
# number: the spec's bound per function (core.scalar.max_rel_error, 2**-13 unless set: well
# below bf16's half ulp, 2**-9, so the engine is exact enough for bf16 outputs).
BOUNDS = accuracy_bounds(load("trn2"))
REL_BOUND = 2.0**-13
TINY, HUGE = 2.0**-126, float(np.finfo(np.float32).max)

NAMES = [f.name for f in DEFAULT_FUNCTIONS]


def every_binade(rng: np.random.Generator, per_binade: int) -> np.ndarray:
    """Random fp32 values from each binade of fp32, both signs, subnormal binades included."""
    out = []
    for field in range(1, 255):
        mant = rng.integers(0, 1 << 23, per_binade, dtype=np.uint32)
        out.append(np.uint32(field << 23) | mant)
    for j in range(23):
        low = rng.integers(0, 1 << j, per_binade, dtype=np.uint32) if j else 0
        out.append(np.full(per_binade, 1 << j, dtype=np.uint32) | low)
    mags = np.concatenate(out)
    return np.concatenate([mags, mags | np.uint32(0x80000000)]).view(np.float32)


def _eval(name: str, x: np.ndarray) -> np.ndarray:
    i = NAMES.index(name)
    return evaluate(DEFAULT_FUNCTIONS, i, x.astype(np.float32).view(np.uint32)).view(np.float32)


@pytest.mark.parametrize("name", NAMES)
def test_relative_error_within_bound_over_every_binade(name, seed):
    rng = np.random.default_rng([seed, NAMES.index(name)])
    x = every_binade(rng, 48)
    spec = DEFAULT_FUNCTIONS[NAMES.index(name)]
    if spec.mode == "uniform" and not spec.reduced:  # and densely over the fitted range
        x = np.concatenate([x, rng.uniform(spec.lo, spec.hi, 20000).astype(np.float32)])
    y = _eval(name, x).astype(np.float64)
    with np.errstate(all="ignore"):
        ref = REFERENCE[name](x.astype(np.float64))
    normal = (np.abs(ref) >= TINY) & (np.abs(ref) <= HUGE)
    assert normal.sum() > 8000, name  # most binades give a normal result
    x, y, ref = x[normal], y[normal], ref[normal]
    rel = np.abs(y - ref) / np.abs(ref)
    worst = int(np.argmax(rel))
    assert rel[worst] <= BOUNDS[name], f"{name}: rel error {rel[worst]:.3g} at x={x[worst]!r}"


def test_every_function_has_the_default_bound_unless_the_spec_sets_one(tmp_path):
    assert set(BOUNDS) == set(NAMES) and set(BOUNDS.values()) == {REL_BOUND}
    (tmp_path / "toy.yaml").write_text(
        "extends: trn2\nchip:\n  name: toy\n  title: Toy\n  core:\n    scalar:\n"
        "      max_rel_error: 1.0e-3\n      approximations:\n"
        "        sin: {max_rel_error: 1.0e-8}\n")
    spec = load(tmp_path / "toy.yaml")
    bounds = accuracy_bounds(spec)
    assert bounds["sin"] == 1e-8 and bounds["exp"] == 1e-3
    (table,) = scalar_datasheet(spec)
    verdict = {row[0]: row[-1] for row in table["rows"]}
    assert verdict["sin"] == "EXCEEDS" and verdict["exp"] == "within"
    rom = {row[0]: row[table["columns"].index("ROM rows")] for row in table["rows"]}
    assert (rom["sin"], rom["cos"], rom["exp"]) == (4, "sin's", 8)


def test_hold_out_inputs_named_in_the_issue():
    assert _one("sqrt", 1e30) == pytest.approx(1e15, rel=REL_BOUND)
    assert _one("log", 1e30) == pytest.approx(69.0775527898, rel=REL_BOUND)
    assert _one("rsqrt", 1e30) == pytest.approx(1e-15, rel=REL_BOUND)
    assert _one("reciprocal", 1e30) == pytest.approx(1e-30, rel=REL_BOUND)
    assert _one("sqrt", 1e-40) == pytest.approx(1e-20, rel=REL_BOUND)
    assert _one("rsqrt", 4.3e9 * 100) == pytest.approx((4.3e11) ** -0.5, rel=REL_BOUND)


def test_accuracy_table_reports_every_function_within_bound():
    rows = accuracy_table()
    assert [r["function"] for r in rows] == NAMES
    for r in rows:
        assert 0 <= r["max_rel_error"] <= REL_BOUND, r
        assert r["points"] > 10000
    by_name = {r["function"]: r for r in rows}
    for name in ("relu", "identity", "abs"):
        assert by_name[name]["max_rel_error"] == 0, name
    assert by_name["square"]["max_rel_error"] <= 2.0**-24
    assert by_name["exp"]["rom_rows"] == 8 and by_name["exp"]["reduction"] == "exponent"
    assert (by_name["cos"]["rom_rows"], by_name["cos"]["rom_shared"]) == (0, "sin")


def _one(name: str, v: float) -> float:
    return float(_eval(name, np.array([v], np.float32))[0])


def _bits(name: str, v: float) -> int:
    return int(_eval(name, np.array([v], np.float32)).view(np.uint32)[0])


def test_ieee_special_values():
    inf, nan = math.inf, 0x7FC00000
    pos0, neg0, pinf, ninf = 0x00000000, 0x80000000, 0x7F800000, 0xFF800000
    assert _bits("sqrt", -4.0) == nan and _bits("sqrt", -inf) == nan
    assert _bits("sqrt", 0.0) == pos0 and _bits("sqrt", -0.0) == neg0
    assert _bits("sqrt", inf) == pinf
    assert _bits("log", 0.0) == ninf and _bits("log", -0.0) == ninf
    assert _bits("log", -1.0) == nan and _bits("log", inf) == pinf and _bits("log", 1.0) == pos0
    assert _bits("rsqrt", 0.0) == pinf and _bits("rsqrt", -0.0) == ninf
    assert _bits("rsqrt", inf) == pos0 and _bits("rsqrt", -2.0) == nan
    assert _bits("reciprocal", 0.0) == pinf and _bits("reciprocal", -0.0) == ninf
    assert _bits("reciprocal", inf) == pos0 and _bits("reciprocal", -inf) == neg0
    assert _bits("exp", inf) == pinf and _bits("exp", -inf) == pos0 and _one("exp", 0.0) == 1.0
    assert _bits("exp", 89.0) == pinf and _bits("exp", -104.0) == pos0
    assert _one("sigmoid", 50.0) == 1.0 and _bits("sigmoid", -inf) == pos0
    assert _one("sigmoid", 0.0) == 0.5
    assert _one("tanh", -20.0) == -1.0 and _one("tanh", inf) == 1.0
    assert _one("erf", 4.5) == 1.0 and _one("erf", -inf) == -1.0
    assert _one("gelu", 12.5) == 12.5 and _one("silu", 30.0) == 30.0
    assert _one("gelu", inf) == inf and _bits("gelu", -inf) == pos0
    assert _bits("silu", -inf) == neg0 and _one("softplus", inf) == inf
    assert _bits("silu", -1e30) == neg0 and _bits("mish", -1e30) == neg0
    assert _bits("gelu_tanh", -100.0) == neg0 and _one("gelu_tanh", 3e30) == _one("abs", 3e30)
    assert _bits("abs", -0.0) == pos0 and _one("abs", -inf) == inf
    assert _one("square", -3.0) == 9.0 and _one("square", 1e20) == inf
    assert _one("softplus", 25.0) == 25.0 and _bits("softplus", -inf) == pos0
    assert _one("relu", -3.0) == 0.0 and _one("relu", 2.5) == 2.5
    assert _bits("relu", -0.0) == pos0
    for name in ("sqrt", "rsqrt", "reciprocal", "exp"):  # exact at powers of 4 / 0
        assert _one(name, 16.0) == {"sqrt": 4.0, "rsqrt": 0.25, "reciprocal": 0.0625,
                                    "exp": _one("exp", 16.0)}[name]
    half_pi = int(np.float32(math.pi / 2).view(np.uint32))
    assert _bits("sin", 0.0) == pos0 and _bits("sin", -0.0) == neg0
    assert _one("cos", 0.0) == 1.0 and _one("cos", -0.0) == 1.0 and _one("cos", 1e-30) == 1.0
    for name in ("sin", "cos"):
        assert _bits(name, inf) == nan and _bits(name, -inf) == nan, name
    assert _bits("arctan", inf) == half_pi and _bits("arctan", -inf) == half_pi | neg0
    assert _bits("arctan", 0.0) == pos0 and _bits("arctan", -0.0) == neg0
    assert _one("arctan", 3e38) == _one("arctan", inf)
    assert _one("sin", 1e-30) == float(np.float32(1e-30))
    for name in NAMES:
        assert _bits(name, math.nan) == nan, name
        assert _eval(name, np.array([-np.nan], np.float32)).view(np.uint32)[0] == nan, name


def test_saturating_functions_follow_their_asymptotes():
    x = np.float32([-30.0, -60.0, -85.0, -87.0])
    xd = x.astype(np.float64)
    for name, asymptote in (("sigmoid", np.exp), ("softplus", np.exp),
                            ("silu", lambda v: v * np.exp(v)),
                            ("mish", lambda v: v * np.exp(v))):
        y = _eval(name, x).astype(np.float64)
        assert np.all(np.abs(y / asymptote(xd) - 1) < REL_BOUND), name
    assert _one("silu", -91.0) == pytest.approx(-91.0 * math.exp(-91.0), rel=REL_BOUND)
    assert _one("gelu", -13.0) == pytest.approx(-13.0 * special.ndtr(-13.0), rel=REL_BOUND)
    c = math.sqrt(2.0 / math.pi)
    assert _one("gelu_tanh", -9.0) == pytest.approx(
        -9.0 * math.exp(2 * c * (-9.0 - 0.044715 * 729.0)), rel=REL_BOUND)


def test_subnormal_inputs_and_results():
    sub = np.float32(1e-40)
    assert _one("sqrt", float(sub)) == pytest.approx(math.sqrt(float(sub)), rel=REL_BOUND)
    assert _one("log", float(sub)) == pytest.approx(math.log(float(sub)), rel=REL_BOUND)
    assert _one("rsqrt", float(sub)) == pytest.approx(float(sub) ** -0.5, rel=REL_BOUND)
    assert _one("reciprocal", 2.0**-128 * 1.5) == pytest.approx(2.0**128 / 1.5, rel=REL_BOUND)
    assert _bits("reciprocal", 2.0**-149) == 0x7F800000  # 2**149 overflows
    # a subnormal result: rounded once, to nearest even
    assert _one("exp", -100.0) == pytest.approx(math.exp(-100.0), rel=2.0**-7)
    assert _one("reciprocal", 2.0**127 * 1.5) == pytest.approx(2.0**-127 / 1.5, rel=2.0**-20)
    assert _one("tanh", float(sub)) == float(sub) and _one("identity", float(sub)) == float(sub)


def test_log_is_accurate_next_to_its_root():
    x = np.nextafter(np.float32(1.0), np.float32(2.0)) + np.arange(64, dtype=np.float32) * \
        np.float32(2.0**-20)
    x = np.concatenate([x, np.float32(1.0) - np.arange(1, 64, dtype=np.float32) *
                        np.float32(2.0**-24)]).astype(np.float32)
    y = _eval("log", x).astype(np.float64)
    ref = np.log(x.astype(np.float64))
    assert np.max(np.abs(y - ref) / np.abs(ref)) < 1e-4
    assert _one("log", 1.0) == 0.0


def test_fit_is_deterministic_and_fp32():
    spec = DEFAULT_FUNCTIONS[NAMES.index("gelu")]
    a, b = fit_function(spec), fit_function(spec)
    assert a.dtype == np.float32 and a.shape == (spec.segments, spec.degree + 1)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    degree, words = rom_words(DEFAULT_FUNCTIONS)
    tables = activation_table(DEFAULT_FUNCTIONS)
    assert [t.base for t in tables][-1] == len(words) - DEFAULT_FUNCTIONS[-1].rows
    # sin and cos (same range, segments, degree) read one copy of their two kernels' rows
    sin, cos = tables[NAMES.index("sin")], tables[NAMES.index("cos")]
    assert (cos.shared, cos.rows, cos.base, sin.shared, sin.rows) == ("sin", 0, sin.base,
                                                                     None, 4)
    assert degree == 3 and len(words) == sum(f.rows for f in DEFAULT_FUNCTIONS) - cos.spec.rows


def test_more_segments_reduce_the_error():
    errors = []
    for segments in (5, 10, 20):
        spec = FunctionSpec("sigmoid", lo=-8.0, hi=17.0, segments=segments, degree=2,
                            below="exp", above="one")
        errors.append(accuracy_table((spec,))[0]["max_rel_error"])
    assert errors[0] > errors[1] > errors[2]


def test_sin_and_cos_are_reduced_exactly_at_the_hardest_inputs():
    # The fp32 values nearest a multiple of pi/2 in the binades [2**95, 2**96) and
    # [2**34, 2**35) (the two closest approaches over all of fp32, about 2**-29.9 and 2**-29.5
    # quarter turns), their neighbours, and fp32(k pi) for k up to 2**20: results of the
    # order of 1e-9 that lose every bit with a reduction in fp32.
    hard = np.float32([16367173 * 2.0**72, 10741887 * 2.0**11])
    k = np.arange(1, 1 << 20, 97, dtype=np.float64)
    x = np.concatenate([hard, np.nextafter(hard, np.float32(0)), (k * math.pi).astype(np.float32)])
    x = np.concatenate([x, -x])
    for name, ref in (("sin", np.sin), ("cos", np.cos)):
        y = _eval(name, x).astype(np.float64)
        want = ref(x.astype(np.float64))
        rel = np.abs(y - want) / np.abs(want)
        assert rel.max() <= BOUNDS[name], (name, x[np.argmax(rel)], rel.max())
    assert abs(_one("cos", float(hard[0]))) < 2e-9  # next to a zero of cos
