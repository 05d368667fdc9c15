"""What the public NKI kernels (aws-neuron/nki-samples' reference kernels) need beyond the
tutorials, in kernels of our own (tests/nki_kernels/sample_idioms.py) checked against numpy
in float64."""

from __future__ import annotations

import runpy
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import kernels
import kernels.nki as knki
from hdl.core.isa import format_instruction

HERE = Path(__file__).parent / "nki_kernels"


@pytest.fixture(scope="module")
def k():
    with knki.installed():
        import neuronxcc.nki.language as nl

        yield {**runpy.run_path(str(HERE / "sample_idioms.py")), "nl": nl}


def test_a_jit_function_called_from_a_kernel_and_integer_columns(k, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, 256)).astype(np.float32)
    s = rng.standard_normal((128, 4)).astype(np.float32)
    out, best = k["column_scaled"](x, s)
    want = x * np.repeat(s, 64, axis=1)
    assert np.array_equal(out, want)  # one fp32 multiply per element, as numpy's
    assert np.array_equal(best, np.repeat(s.max(axis=1, keepdims=True), 2, axis=1))


def test_affine_select_of_a_matmul_in_psum(k, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((64, 128)).astype(np.float32)
    kk = rng.standard_normal((64, 128)).astype(np.float32)
    out = k["causal_scores"](q, kk)
    want = q.T.astype(np.float64) @ kk.astype(np.float64)
    keep = np.arange(128)[:, None] >= np.arange(128)[None, :]
    assert np.all(out[~keep] == np.float32(-9984.0))
    err = np.abs(out[keep] - want[keep]).max() / np.abs(want).max()
    assert err < 1e-5


@pytest.mark.parametrize(("dtype", "ml"), [("bfloat16", ml_dtypes.bfloat16),
                                           ("float16", np.float16), ("float32", np.float32)])
def test_static_cast_rounds_host_arrays_as_numpy(k, dtype, ml, seed):
    x = (np.random.default_rng(seed).random((4, 5)) - 0.5) * 2
    got = k["nl"].static_cast(x, getattr(k["nl"], dtype))
    assert got.dtype == np.dtype(ml) and np.array_equal(got, x.astype(ml))
    assert k["nl"].static_cast(1.5, k["nl"].float32) == np.float32(1.5)


def test_masks_that_are_conditions_on_loop_indices(k, seed):
    x = np.random.default_rng(seed).standard_normal((512, 64)).astype(np.float32)
    out = k["tiles_by_condition"](x)
    even = (np.arange(512) // 128 % 2 == 0)[:, None]
    assert np.array_equal(out, np.where(even, x + np.float32(1), x))


def test_python_and_between_masks_is_their_intersection(k, seed):
    x = np.random.default_rng(seed).standard_normal((128, 64)).astype(np.float32)
    want = x.copy()
    want[:64, :32] *= np.float32(2)
    assert np.array_equal(k["corner_doubled"](x, True), want)
    assert np.array_equal(k["corner_doubled"](x, False), want)
    # the same instructions as the mask joined by &, the first multiply (its result unused)
    # issued as written where by_keyword is true and skipped where it is false
    joined = _program(k["corner_doubled_by_and"], x)
    assert _program(k["corner_doubled"], x, False) == joined
    assert len(_program(k["corner_doubled"], x, True)) > len(joined)


def test_results_under_a_mask_are_tiles_of_the_whole_shape(k, seed):
    """As NKI has it (its nc_match_replace8 example stores such a result whole): the
    result of an instruction with a mask is a tile of its operand's shape, the positions
    the mask keeps written, whose rows start where the mask's do."""
    x = np.random.default_rng(seed).standard_normal((128, 32)).astype(np.float32)
    top, replaced, exps = k["masked_results_are_whole"](x)
    assert top.shape == (128, 8) and replaced.shape == exps.shape == x.shape
    first = x[:64, :16]
    order = -np.sort(-first, axis=1)[:, :8]
    assert np.array_equal(top[:64], order)
    want = x.copy()
    for row in range(64):
        for v in order[row]:
            want[row, np.flatnonzero(first[row] == v)[0]] = -1.0
    assert np.array_equal(replaced, want)
    want = x.astype(np.float64)
    want[64:] = np.exp(want[64:])
    np.testing.assert_allclose(exps, want, rtol=kernels.POLYNOMIAL)


def test_affine_expressions_under_a_mask_are_evaluated_where_the_mask_keeps(k, seed):
    """An affine_select's predicate and an iota's expression are over the whole tile's
    positions: under a mask they are evaluated at the kept ones (rows from 64, columns from
    8), not at the cut's own from 0, and the result has the whole shape."""
    x = np.random.default_rng(seed).standard_normal((128, 64)).astype(np.float32)
    i, j = np.mgrid[0:128, 0:64]
    kept = (i >= 64) & (j >= 8)
    want = x.copy()
    want[kept & (i - 2 * j < 40)] = -9.0
    assert np.array_equal(k["masked_affine_select"](x), want)
    want = x.copy()
    want[kept] = (100 * i + j)[kept]
    assert np.array_equal(k["masked_iota"](x), want)


def test_a_partial_reduction_under_a_mask_is_whole_too(k, seed):
    x = np.random.default_rng(seed).standard_normal((128, 5, 4)).astype(np.float32)
    want = x[:, :, 0].copy()
    want[:64, :3] = x[:64, :3].astype(np.float64).sum(axis=2)
    np.testing.assert_allclose(k["masked_partial_sum"](x), want, rtol=1e-6, atol=1e-6)


def test_python_or_between_masks_is_refused_as_a_union(k):
    with pytest.raises(knki.NotSupported, match=r"mask \| mask is not supported"):
        k["corner_by_or"](np.zeros((128, 64), np.float32))


def test_a_matmul_of_a_transpose_in_psum(k, seed):
    a = np.random.default_rng(seed).standard_normal((128, 128)).astype(np.float32)
    out = k["gram_of_transpose"](a)
    want = a.astype(np.float64) @ a.T.astype(np.float64)  # at.T @ at with at = a.T
    assert np.abs(out - want).max() / np.abs(want).max() < 1e-5


def test_a_loaded_element_broadcast_over_partitions(k, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, 64)).astype(np.float32)
    s = rng.standard_normal(3).astype(np.float32)
    out = k["shifted_row_sums"](x, s)
    want = (x.astype(np.float64).sum(axis=1) * 2 + s[1])[:, None]
    assert out.shape == (128, 1)
    assert np.abs(out - want).max() / np.abs(want).max() < 1e-5


def test_a_number_over_a_tile_broadcast_to_rows(k, seed):
    x = np.random.default_rng(seed).random((128, 64)).astype(np.float32) + 0.5
    out = k["rows_over_their_sums"](x)
    want = x / x.astype(np.float64).sum(axis=1, keepdims=True)
    assert np.abs(out - want).max() / np.abs(want).max() < 1e-5


def test_benchmark_writes_its_trace_where_asked(k, tmp_path, seed):
    import json

    import kernels.nki.launch as launch

    path = tmp_path / "local_trace.ntff"
    bench = launch.benchmark(warmup=5, iters=20, save_trace_name=str(path))(
        k["rows_over_their_sums"].func)
    bench(np.ones((128, 64), np.float32))
    events = json.loads(path.read_text())["traceEvents"]
    assert {"dma", "reduce", "act"} <= {e.get("name") for e in events}
    latency = bench.benchmark_result.nc_latency
    assert latency.get_latency_percentile(1) == launch.SESSION.launches[-1].result.time * 1e6


def test_a_mask_that_is_not_a_box_is_refused_by_name(k):
    with pytest.raises(knki.NotSupported, match=r"a mask comparing an expression over several "
                                                r"index axes .* supported: comparisons of one "
                                                r"index axis with an integer, joined by &"):
        k["triangle_masked"](np.zeros((128, 128), np.float32))


def test_integers_by_value_and_bitwise_by_word(k, seed):
    rng = np.random.default_rng(seed)
    x = (rng.integers(-2000, 2000, (128, 64)) / 2).astype(np.float32)  # ties included
    y = rng.integers(-2**31, 2**31 - 1, (128, 64)).astype(np.int32)
    xi, half, low, mixed, copied = k["integer_arithmetic"](x, y)
    want_xi = np.rint(x).astype(np.int32)
    assert np.array_equal(xi, want_xi)
    # y + 3 in fp32 (y rounded to fp32 first), cast back to int32, then halved in fp32
    plus = np.clip(np.rint((y.astype(np.float32) + np.float32(3)).astype(np.float64)),
                   -2**31, 2**31 - 1).astype(np.int64).astype(np.int32)
    assert np.array_equal(half, plus.astype(np.float32) * np.float32(0.5))
    assert np.array_equal(low, y & 255)
    assert np.array_equal(mixed, y ^ want_xi)
    assert np.array_equal(copied, y)


def test_a_trace_kernel_writes_its_output_argument(k, seed):
    x = np.random.default_rng(seed).standard_normal((128, 32)).astype(np.float32)
    out = np.zeros_like(x)
    knki.simulate_kernel(k["doubled_into"], x, out)
    assert np.array_equal(out, x * 2)


@pytest.mark.parametrize("reverse", [False, True])
def test_tensor_copy_predicated(k, reverse, seed):
    rng = np.random.default_rng(seed)
    x, y = (rng.standard_normal((128, 64)).astype(np.float32) for _ in range(2))
    pred = rng.random((128, 64)) < 0.5
    out = k["predicated"](pred, x, y, reverse)
    assert np.array_equal(out, np.where(pred != reverse, x, y))


def test_broadcast_to_view_and_dge_mode(k, seed):
    rng = np.random.default_rng(seed)
    row = rng.standard_normal((1, 64)).astype(np.float32)
    x = rng.standard_normal((128, 64)).astype(np.float32)
    wide, bits = k["row_broadcast_and_bits"](row, x)
    assert np.array_equal(wide, np.broadcast_to(row, x.shape))
    assert np.array_equal(bits, x.view(np.uint32))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_an_accumulating_dma_adds(k, dtype, seed):
    """``dst_rmw_op=np.add``: the sum in fp32, rounded to the destination's type to nearest
    even (ml_dtypes' cast); another operation is refused at its line, not copied."""
    x, y = np.random.default_rng(seed).standard_normal((2, 128, 96)).astype(dtype)
    want = (x.astype(np.float32) + y.astype(np.float32)).astype(dtype)
    assert np.array_equal(k["accumulating_dma"](x, y), want)
    with pytest.raises(knki.NotSupported,
                       match=r"sample_idioms.py:\d+: dma_copy\(dst_rmw_op=multiply\)"):
        k["multiplying_dma"](x)


def test_dma_transpose(k, seed):
    x = np.random.default_rng(seed).standard_normal((256, 128)).astype(np.float32)
    assert np.array_equal(k["transposed_by_dma"](x), x.T)


def test_dma_transpose_of_three_and_four_dimensions(k, seed):
    """Three dimensions (2, 1, 0) of rows gathered by a tile of indices, and four
    (3, 1, 2, 0) of an on-chip tile, as NKI's rule for each rank permutes them."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2**16, (40, 4, 64)).astype(np.uint16)
    rows = rng.integers(0, 40, (16, 1)).astype(np.uint32)
    y = rng.standard_normal((8, 3, 2, 16)).astype(np.float16)
    out, out4 = k["transposed_3d_and_4d"](x, rows, y)
    assert np.array_equal(out, np.transpose(x[rows[:, 0]], (2, 1, 0)))
    assert np.array_equal(out4, np.transpose(y, (3, 1, 2, 0)))


def test_an_integer_partition_broadcast(k, seed):
    row = np.random.default_rng(seed).integers(-2**31, 2**31 - 1, (1, 96)).astype(np.int32)
    assert np.array_equal(k["int_rows"](row), np.broadcast_to(row, (128, 96)))


def test_select_reduce(k, seed):
    """Whole, and under a mask on rows 64.. and the first 40 columns: the kept positions
    selected and their maxima in the kept rows of reduce_res."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, 64)).astype(np.float32)
    fill = rng.standard_normal((128, 1)).astype(np.float32)
    pred = (rng.random((128, 64)) < 0.5).astype(np.uint8)
    selected = np.where(pred != 0, x, fill)
    out, best = k["selected_with_row_max"](pred, x, fill)
    assert np.array_equal(out, selected)
    assert np.array_equal(best, selected.max(axis=1, keepdims=True))
    out, best = k["masked_select_with_row_max"](pred, x, fill)
    want = x.copy()
    want[64:, :40] = selected[64:, :40]
    assert np.array_equal(out, want)
    want_best = np.full((128, 1), 7.0, np.float32)
    want_best[64:] = want[64:, :40].max(axis=1, keepdims=True)
    assert np.array_equal(best, want_best)


def test_a_number_assigned_to_elements_of_one_partition(k, seed):
    """Each element written; at partitions 0 and 32 by GpSimd's memset, elsewhere, where
    no engine may start an access of one partition, by DMA from a constant."""
    x = np.random.default_rng(seed).standard_normal((128, 8)).astype(np.float32)
    want = x.copy()
    i, j = np.mgrid[0:40, 0:3]
    want[:40, :3] = 10 * i + j
    assert np.array_equal(k["elements_set_one_by_one"](x), want)
    program = _program(k["elements_set_one_by_one"], x)
    memsets = [line for line in program if "memset" in line.lower()]
    assert len(memsets) == 6 and all(line.startswith("gpsimd") for line in memsets)
    assert sum(": dma dst=" in line for line in program) == 2 + 38 * 3


def test_device_print_shows_the_value_at_its_point(k, capsys, seed):
    x = np.random.default_rng(seed).standard_normal((4, 3)).astype(np.float32)
    capsys.readouterr()
    k["printed_twice"](x)
    assert capsys.readouterr().out == f"loaded: {x}\ndoubled: {x * 2}\n"


def _program(kernel, *args) -> list[str]:
    program = kernel.trace(*args)[0].program()
    return [f"{s}: {format_instruction(i)}" for s in sorted(program.streams)
            for i in program.streams[s]]


def test_nki_0_2_forms_give_the_same_programs(k, seed):
    """tensor_copy_predicated, dma_transpose and select_reduce written with ``dst`` first
    (NKI 0.2): the results of the NKI 0.1 kernels, and their programs."""
    with knki.installed():
        v2 = runpy.run_path(str(HERE / "isa_more_v2.py"))
    rng = np.random.default_rng(seed)
    x, y = (rng.standard_normal((128, 64)).astype(np.float32) for _ in range(2))
    pred = (rng.random((128, 64)) < 0.5).astype(np.uint8)
    fill = rng.standard_normal((128, 1)).astype(np.float32)
    xt = rng.standard_normal((256, 128)).astype(np.float32)
    for name, args in (("predicated", (pred, x, y, True)), ("transposed_by_dma", (xt,)),
                       ("selected_with_row_max", (pred, x, fill))):
        one, two = k[name](*args), v2[name](*args)
        for a, b in zip(one if isinstance(one, tuple) else (one,),
                        two if isinstance(two, tuple) else (two,), strict=True):
            assert np.array_equal(a, b)
        assert _program(k[name], *args) == _program(v2[name], *args)
