"""NKI's direct allocation (``nki.compiler``) and the calls the public kernels that use it
need, in kernels of our own (tests/nki_kernels/direct_allocation.py) checked against numpy."""

from __future__ import annotations

import runpy
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import kernels.nki as knki
from hdl.core.isa import DmaCopy

HERE = Path(__file__).parent / "nki_kernels"


@pytest.fixture(scope="module")
def k():
    with knki.installed():
        yield runpy.run_path(str(HERE / "direct_allocation.py"))


def _load_offsets(kernel, *args) -> Counter:
    """How many loads into SBUF the kernel's program makes at each byte."""
    streams = kernel.trace(*args)[0].program().streams
    return Counter(ins.dst.offset for s in streams.values() for ins in s
                   if isinstance(ins, DmaCopy) and ins.dst.space == "sbuf")


def test_modulo_allocation_takes_turns_in_its_tiles(k, seed):
    x = np.random.default_rng(seed).standard_normal((384, 512)).astype(np.float32)
    assert np.array_equal(k["doubled_in_two_buffers"](x), x * 2)
    # three row tiles (the fourth masked off) in two physical tiles of 2,048 bytes
    assert _load_offsets(k["doubled_in_two_buffers"], x) == Counter({0: 2, 2048: 1})


def test_force_auto_alloc_ignores_the_placements(k, seed):
    x = np.random.default_rng(seed).standard_normal((384, 512)).astype(np.float32)
    assert np.array_equal(k["auto_doubled"](x), x * 2)
    assert len(_load_offsets(k["auto_doubled"], x)) == 3


def test_tiles_sharing_a_bank_are_each_their_own_first_write(k, seed):
    x = np.random.default_rng(seed).standard_normal((128, 1024)).astype(np.float32)
    out = k["transposed_through_one_bank"](x, np.eye(128, dtype=np.float32))
    want = x.reshape(128, 8, 128).transpose(2, 1, 0).reshape(128, 1024)
    assert np.array_equal(out, want)


def test_a_new_psum_tensor_in_the_same_bank_starts_its_sums_afresh(k, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((384, 128)).astype(np.float32)
    w = rng.standard_normal((128, 256)).astype(np.float32)
    out = k["products_in_bank_seven"](x, w)
    want = np.concatenate([x[i:i + 128].T.astype(np.float64) @ w for i in (0, 128, 256)])
    assert np.abs(out - want).max() / np.abs(want).max() < 1e-5


def test_tensor_scalar_reduce(k, seed):
    x = np.random.default_rng(seed).standard_normal((128, 300)).astype(np.float32)
    out, best = k["scaled_with_row_max"](x)
    assert np.array_equal(out, x * np.float32(3))
    assert np.array_equal(best[:, 0], (x * np.float32(3)).max(axis=1))


def test_isa_reciprocal(k, seed):
    """nisa.reciprocal on the vector engine, as NKI runs it: IEEE's fp32 division, bit for
    bit numpy's; one TensorScalar there, of NKI's max(MIN_II, 8 N) cycles (the spec's
    op_cycles over the engine's elements a cycle)."""
    rng = np.random.default_rng(seed)
    x = (rng.uniform(0.5, 4.0, (128, 64)) * rng.choice([-1, 1], (128, 64))).astype(np.float32)
    x[0, :4] = [0.0, -0.0, np.inf, 3e-39]  # infinities both ways, a subnormal's overflow
    out = k["reciprocals"](x)
    with np.errstate(divide="ignore", over="ignore"):
        assert np.array_equal(out.view(np.uint32), (np.float32(1) / x).view(np.uint32))
    streams = k["reciprocals"].trace(x)[0].program().streams
    assert [type(i).__name__ for i in streams["vector"]].count("TensorScalar") == 1
    assert "scalar" not in streams or not any(type(i).__name__ == "Activation"
                                              for i in streams["scalar"])
    p = knki.launch.params_for("trn1")
    busy = knki.SESSION.launches[-1].result.busy["vector"]
    want = p.access_start + max(p.min_interval, 8 * 64 / p.vector_elements)
    assert busy == pytest.approx(want / p.clock("vector"))


def test_a_tile_placed_past_sbuf_is_refused_at_its_line(k):
    x = np.zeros((128, 512), np.float32)
    with pytest.raises(knki.NkiError, match=r"direct_allocation.py:\d+: `sbuf` block \(\) "
                                             r"is placed at byte 1048576 with 2048 bytes per "
                                             r"partition, past the \d+ bytes of an SBUF"):
        k["placed_past_sbuf"](x, 1 << 20)


def test_a_bank_the_core_lacks_is_refused(k):
    with pytest.raises(knki.NkiError, match=r"is placed in PSUM bank 9; the core has banks 0 "
                                             r"to 7"):
        k["placed_in_bank_nine"](np.zeros((128, 128), np.float32))


def test_psum_tensors_are_allocated_block_by_block(k, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((640, 128)).astype(np.float32)
    w = rng.standard_normal((128, 512)).astype(np.float32)
    out = k["products_in_psum_blocks"](x, w)
    prods = [x[i:i + 128].T.astype(np.float64) @ w for i in range(0, 640, 128)]
    want = np.concatenate([np.concatenate([2 * p, 2 * p], axis=1) for p in prods])
    assert np.abs(out - want).max() / np.abs(want).max() < 1e-5


def test_matmul_of_two_types_in_the_one_they_promote_to(k, seed):
    import ml_dtypes

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, 128)).astype(np.float32)
    y = rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16)
    out = k["mixed_product"](x, y)
    want = x.astype(np.float64) @ y.astype(np.float64)
    assert np.abs(out - want).max() / np.abs(want).max() < 1e-5


def test_a_loop_body_places_its_tensors_once(k):
    """A body that adds to its address places its tensor once, as NKI's single trace of the
    body does: every iteration uses the first one's tile (each adds its index), and none
    lands past SBUF."""
    x = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    out = k["address_advanced_in_a_loop"](x)
    np.testing.assert_array_equal(out, x[None] + np.arange(4, dtype=np.float32)[:, None, None])


def test_a_body_that_changes_its_tensors_is_refused(k):
    with pytest.raises(knki.NkiError, match=r"a later iteration of a loop makes an SBUF tensor "
                                             r"\(128, 9\) of fp32 where the first made "
                                             r"\(128, 8\) of fp32"):
        k["a_body_that_changes_its_tensors"](np.zeros((128, 8), np.float32))


def test_a_grid_of_no_instances_is_refused(k):
    with pytest.raises(knki.NkiError, match=r"a launch grid dimension of 0 launches no "
                                             r"instance of reciprocals"):
        k["reciprocals"][0]


def test_a_rule_of_the_core_names_the_kernel_line(k):
    import ml_dtypes

    line = next(i for i, text in enumerate((HERE / "direct_allocation.py").read_text()
                                           .splitlines(), 1) if "# ERROR mixed" in text)
    with pytest.raises(knki.NkiError, match=rf"direct_allocation.py:{line}: the core's rules "
                                             r"refuse the instruction this line makes: "
                                             r"tensor\[\d+\] `matmul"):
        k["mixed_isa_product"](np.zeros((128, 128), np.float32),
                               np.zeros((128, 64), ml_dtypes.bfloat16))
