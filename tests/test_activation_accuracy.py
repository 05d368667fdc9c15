"""Accuracy of the activation functions against independent references (numpy, scipy in
float64), out-of-range rules, and the fitting's determinism."""

import math

import numpy as np
import pytest
from scipy import special

from generators.vector import accuracy_table
from hdl.vector.fitting import activation_table, fit_function, rom_words
from hdl.vector.functions import DEFAULT_FUNCTIONS, FunctionSpec
from sim.golden.activation import evaluate

# The references, written apart from the generator's table.
REFERENCE = {
    "identity": lambda x: x,
    "relu": lambda x: np.where(x > 0, x, 0.0),
    "exp": np.exp,
    "gelu": lambda x: 0.5 * x * (1.0 + special.erf(x / math.sqrt(2.0))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "softplus": lambda x: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0),
    "erf": special.erf,
    "reciprocal": np.reciprocal,
    "rsqrt": lambda x: np.sqrt(1.0 / x),
    "sqrt": np.sqrt,
    "log": np.log,
}

# Maximum relative error (|y - f| / max(|f|, 2**-20)) asserted over each function's range:
# well below bf16's half ulp (2**-9), so the engine is exact enough for bf16 outputs.
REL_BOUND = 2.0**-13
FLOOR = 2.0**-20

NAMES = [f.name for f in DEFAULT_FUNCTIONS]


def _points(spec: FunctionSpec, rng: np.random.Generator) -> np.ndarray:
    if spec.mode == "exact":
        return rng.standard_normal(20000).astype(np.float32) * 10
    if spec.mode == "log":
        e = rng.uniform(math.log2(spec.lo), math.log2(spec.hi), 40000)
        x = np.exp2(e).astype(np.float32)
        x = x[(x >= np.float32(spec.lo)) & (x < np.float32(spec.hi))]
        return np.concatenate([x, -x]) if spec.negative == "odd" else x
    x = rng.uniform(spec.lo, spec.hi, 40000).astype(np.float32)
    return x[(x >= np.float32(spec.lo)) & (x < np.float32(spec.hi))]


def _eval(name: str, x: np.ndarray) -> np.ndarray:
    i = NAMES.index(name)
    return evaluate(DEFAULT_FUNCTIONS, i, x.astype(np.float32).view(np.uint32)).view(np.float32)


@pytest.mark.parametrize("name", NAMES)
def test_relative_error_within_bound(name):
    spec = DEFAULT_FUNCTIONS[NAMES.index(name)]
    x = _points(spec, np.random.default_rng(NAMES.index(name)))
    y = _eval(name, x).astype(np.float64)
    ref = REFERENCE[name](x.astype(np.float64))
    rel = np.abs(y - ref) / np.maximum(np.abs(ref), FLOOR)
    worst = int(np.argmax(rel))
    assert rel[worst] <= REL_BOUND, f"{name}: rel error {rel[worst]:.3g} at x={x[worst]!r}"


def test_accuracy_table_reports_every_function_within_bound():
    rows = accuracy_table()
    assert [r["function"] for r in rows] == NAMES
    for r in rows:
        assert 0 <= r["max_rel_error"] <= REL_BOUND, r
        assert r["max_abs_error"] >= 0 and r["points"] > 0
    exact = {r["function"]: r for r in rows}
    assert exact["relu"]["max_abs_error"] == 0 and exact["identity"]["max_abs_error"] == 0


def _one(name: str, v: float) -> float:
    return float(_eval(name, np.array([v], np.float32))[0])


def test_out_of_range_rules_and_specials():
    inf = math.inf
    assert _one("exp", -100.0) == 0.0 and _one("exp", 89.0) == inf and _one("exp", inf) == inf
    assert _one("sigmoid", -50.0) == 0.0 and _one("sigmoid", 50.0) == 1.0
    assert _one("tanh", -20.0) == -1.0 and _one("tanh", 9.0) == 1.0
    assert _one("erf", 4.5) == 1.0 and _one("erf", -inf) == -1.0
    assert _one("gelu", 12.5) == 12.5 and _one("silu", 30.0) == 30.0
    assert _one("softplus", 25.0) == 25.0 and _one("softplus", -40.0) == 0.0
    assert _one("relu", -3.0) == 0.0 and _one("relu", 2.5) == 2.5
    assert math.copysign(1.0, _one("relu", -0.0)) == 1.0
    assert _one("reciprocal", 0.0) == inf and _one("reciprocal", -0.0) == -inf
    assert _one("reciprocal", -1e6) == -0.0 and math.copysign(1, _one("reciprocal", -1e6)) < 0
    assert abs(_one("reciprocal", -4.0) + 0.25) < 0.25 * REL_BOUND
    assert math.isnan(_one("log", -1.0)) and _one("log", 0.0) == -inf
    assert math.isnan(_one("sqrt", -4.0)) and _one("sqrt", 0.0) == 0.0
    assert _one("rsqrt", 0.0) == inf and _one("rsqrt", 1e30) == 0.0
    for name in NAMES:
        y = _eval(name, np.array([np.nan], np.float32)).view(np.uint32)[0]
        assert y == 0x7FC00000, name


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
    assert degree == 3 and len(words) == sum(f.rows for f in DEFAULT_FUNCTIONS)
    tables = activation_table(DEFAULT_FUNCTIONS)
    assert [t.base for t in tables][-1] == len(words) - DEFAULT_FUNCTIONS[-1].rows


def test_more_segments_reduce_the_error():
    errors = []
    for segments in (4, 8, 16):
        spec = FunctionSpec("sigmoid", lo=-8.0, hi=8.0, segments=segments, degree=2,
                            below="zero", above="one")
        errors.append(accuracy_table((spec,))[0]["max_rel_error"])
    assert errors[0] > errors[1] > errors[2]
