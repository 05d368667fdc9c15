"""What nki-samples' reference vision and double-row matmul kernels need beyond the
tutorials, in kernels of our own (tests/nki_kernels/sample_vision_idioms.py) checked against
numpy in float64."""

from __future__ import annotations

import runpy
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import kernels.nki as knki

HERE = Path(__file__).parent / "nki_kernels"


@pytest.fixture(scope="module")
def k():
    with knki.installed():
        yield runpy.run_path(str(HERE / "sample_vision_idioms.py"))


@pytest.mark.parametrize("dt", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_finfo_min_of_each_format(k, dt):
    out = k["lowest_fill"](np.zeros((128, 4), dt))
    assert out.dtype == np.dtype(dt)
    assert np.all(out == ml_dtypes.finfo(dt).min)


def test_window_argmax_by_broadcasts_iota_and_where(k, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 3, (128, 8, 2, 4)).astype(np.float32)  # ties in most windows
    out = k["first_window_max"](x)
    flat = x.reshape(128, 8, 8).astype(np.float64)
    want = np.zeros((128, 8, 8), np.int8)
    np.put_along_axis(want, flat.argmax(axis=2)[..., None], 1, axis=2)
    assert np.array_equal(out, want.reshape(x.shape))


def test_where_of_tiles_numbers_and_infinities(k, seed):
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 3, (128, 64)).astype(np.float32)  # 0 false, 1 and 2 true
    a = rng.standard_normal((128, 64)).astype(np.float32) * 1e30
    b = rng.standard_normal((128, 64)).astype(np.float32)
    a[0, :4] = [np.inf, -np.inf, 0.0, 1e-40]
    b[1, :2] = [np.inf, -np.inf]
    got = k["select"](c, a, b)
    want = [np.where(c != 0, a, b), np.where(c != 0, np.float32(2.5), b),
            np.where(c != 0, a, -np.inf), np.where(c != 0, a, b[:, :1])]
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g, w.astype(np.float32))


def test_tensor_tensor_reads_a_column_along_the_row(k, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, 512)).astype(np.float32)
    s = rng.standard_normal((128, 1)).astype(np.float32)
    assert np.array_equal(k["row_scaled"](x, s), x * s)


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2"])
def test_double_row_matmul_contracts_both_pairs(k, name, seed, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    rng = np.random.default_rng(seed)
    from kernels.nki.tracer import numpy_dtype

    dt = numpy_dtype(name)
    a = rng.standard_normal((128, 2, 64)).astype(dt)
    b = rng.standard_normal((128, 2, 256)).astype(dt)
    out = k["double_row_product"](a, b)
    want = np.einsum("kli,klj->ij", a.astype(np.float64), b.astype(np.float64))
    assert np.abs(out - want).max() / np.abs(want).max() < 1e-6  # fp32 accumulation


def test_double_row_matmul_needs_a_double_rate_format(k, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    from kernels.nki.tracer import numpy_dtype

    a = np.ones((128, 2, 8), numpy_dtype("fp8_e4m3"))
    with pytest.raises(knki.NkiError, match="double_row"):
        k["double_row_product"](a, a)


def test_uint8_on_the_compute_engines_by_value(k, seed):
    x = (np.random.default_rng(seed).standard_normal((128, 64)) * 200).astype(np.float32)
    mask, scaled, back = k["byte_mask"](x)
    assert np.array_equal(mask, (x > 0).astype(np.uint8))
    assert np.array_equal(scaled, np.where(x > 0, 255, 0).astype(np.uint8))
    assert np.array_equal(back, np.clip(np.rint(x), 0, 255).astype(np.float32))
