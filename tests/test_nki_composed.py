"""The nki.language calls the engines have no one operation for, made of others by the NKI
front end (floor, ceil, trunc, sign, mod, fmod, logical_not, invert, var,
softmax, rms_norm, expand_dims, shared_identity_matrix): NKI kernels of our own checked
against numpy, exactly where the composition is exact."""

from __future__ import annotations

import runpy
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import kernels
import kernels.nki as knki

HERE = Path(__file__).parent / "nki_kernels"


@pytest.fixture(scope="module")
def k():
    with knki.installed():
        yield runpy.run_path(str(HERE / "composed.py"))


def _rel(out, ref) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(out - ref).max() / np.abs(ref).max())


def test_rounding_is_exact(k, seed):
    """Halves both ways, zero, and integers beyond fp32's fraction: numpy's to the bit."""
    x = (np.random.default_rng(seed).standard_normal((128, 64)) * 10).astype(np.float32)
    x[0, :8] = [2.5, -2.5, 3.0, -3.0, 0.5, -0.5, 0.0, 2.0**24 + 2]
    floor, ceil, trunc, sign, as_int = k["rounding"](x)
    for out, want in ((floor, np.floor(x)), (ceil, np.ceil(x)), (trunc, np.trunc(x)),
                      (sign, np.sign(x))):
        assert np.array_equal(out, want)
    assert as_int.dtype == np.int32 and np.array_equal(as_int, np.floor(x).astype(np.int32))


@pytest.mark.parametrize("y", [7, 59, -7, 3.5])
def test_mod_and_fmod_are_numpys(k, y, seed):
    """Multiples of the divisor included, where a multiplication by the reciprocal alone
    would land a step low."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-5000, 5000, (128, 64)).astype(np.float32)
    x[0, :64] = np.arange(64, dtype=np.float32) * np.float32(y)
    m, f = k["modulo"](x, y)
    assert np.array_equal(m, np.mod(x, np.float32(y)))
    assert np.array_equal(f, np.fmod(x, np.float32(y)))


def test_logic_and_invert(k, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(-2, 3, (128, 64)).astype(np.int32)
    b = rng.integers(0, 2, (128, 64)).astype(np.int32)
    a[0, 0] = -2**31  # every bit of the word
    outs = k["logic"](a, b)
    wants = (np.logical_and(a, b), np.logical_or(a, b), np.logical_xor(a, b),
             np.logical_not(a), ~a)
    for out, want in zip(outs, wants, strict=True):
        assert np.array_equal(out, want)
    assert outs[0].dtype == np.uint8 and outs[4].dtype == np.int32


def test_var_softmax_rms_norm(k, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((128, 96)) * 4).astype(np.float32)
    w = rng.standard_normal((1, 96)).astype(np.float32)
    v, s, r, eye = k["statistics"](x, w)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    tol = kernels.TOLERANCE["fp32"]
    assert _rel(v[:, 0], x64.var(axis=1)) <= tol
    assert _rel(s, e / e.sum(axis=1, keepdims=True)) <= tol
    assert _rel(r, x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + 1e-6) * w) <= tol
    assert np.array_equal(eye, np.eye(128))


def test_what_is_not_composed_is_refused(k):
    with pytest.raises(knki.NotSupported, match=r"nl\.mod of these operands"):
        k["modulo"](np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32))


def test_a_number_is_weakly_typed(k, seed):
    """NKI's type promotion with a number: bf16 x 1.1 is float32 (not rounded to bf16),
    int8 + 2 is int32 (127 + 2 is 129, not saturated)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, 32)).astype(ml_dtypes.bfloat16)
    i = rng.integers(-128, 128, (128, 32)).astype(np.int8)
    i[0, 0] = 127
    a, b = k["with_numbers"](x, i)
    assert a.dtype == np.float32 and b.dtype == np.int32
    assert np.array_equal(a, x.astype(np.float32) * np.float32(1.1))
    assert np.array_equal(b, i.astype(np.int32) + 2)


def test_integer_division_is_true_division(k, seed):
    i = np.random.default_rng(seed).integers(-1000, 1000, (128, 16)).astype(np.int32)
    assert np.array_equal(k["halves"](i), i.astype(np.float32) / 2)
