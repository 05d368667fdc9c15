"""The nki.isa calls the core's ISA has no single instruction for, lowered to sequences of
its instructions (kernels.nki.lower), and iota, memset and nl.shared_constant: NKI kernels
of our own, checked against numpy in float64."""

from __future__ import annotations

import itertools
import runpy
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import kernels
import kernels.nki as knki
from hdl.core.isa import LoadStationary, Memset, format_instruction
from hdl.vector.ops import VectorOp

HERE = Path(__file__).parent / "nki_kernels"
FP32 = kernels.TOLERANCE["fp32"]


@pytest.fixture(scope="module")
def k():
    with knki.installed():
        yield {**runpy.run_path(str(HERE / "isa_more.py")),
               **runpy.run_path(str(HERE / "indexing.py")),
               **{f"v2_{n}": f for n, f in runpy.run_path(str(HERE / "isa_more_v2.py")).items()}}


def _err(out, ref) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(out - ref).max() / np.abs(ref).max())


def test_iota_int_and_float(k):
    ints, floats = k["iota_grid"]()
    want = 3 + 2 * np.arange(128)[:, None] - np.arange(64)[None, :]
    assert ints.dtype == np.int32 and np.array_equal(ints, want)
    assert np.array_equal(floats, want + 0.5)


def test_iota_pattern_of_nki_0_2(k):
    want = 3 + 2 * np.arange(128)[:, None] - np.arange(64)[None, :]
    assert np.array_equal(k["v2_iota_pattern"](), want)


@pytest.mark.parametrize("fill", [float(np.finfo(np.float32).min), -np.inf, 0.0, np.inf])
def test_affine_select_is_exact(k, fill, seed):
    x = np.random.default_rng(seed).standard_normal((128, 128)).astype(np.float32)
    x[5, 3] = -np.inf  # an infinity kept below the diagonal
    want = np.where(np.arange(128)[:, None] >= np.arange(128)[None, :], x, np.float32(fill))
    assert np.array_equal(k["causal"](x, fill), want)
    assert np.array_equal(k["v2_causal"](x, fill), want)
    # one GpSimd instruction, as NKI documents its cost (150 + N cycles, not seven passes)
    streams = k["causal"].trace(x, fill)[0].program().streams
    assert [type(i).__name__ for i in streams["gpsimd"]] == ["SemWait", "AffineSelect",
                                                             "SemSignal"]



@pytest.mark.parametrize("shape", [(32, 32), (5, 17), (1, 32), (32, 1)])
def test_nc_transpose_on_the_vector_engine_is_exact(k, shape, seed):
    """The vector engine's transpose, as numpy's, bit for bit, within its 32 x 32; into
    bfloat16 as ml_dtypes rounds (but the NaN); the tensor engine's the same (but the NaN,
    not bit-accurate on NeuronCore-v2 [ISA]); two Transposes on the vector engine's stream,
    one on the tensor engine's."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    x[0, 0] = np.float32("nan")  # a NaN's bits kept as they are
    out, out16, tensor = k["transposes"](x)
    assert np.array_equal(out.view(np.uint32), x.T.view(np.uint32))
    assert np.array_equal(out16.astype(np.float32)[1:], x.T.astype(ml_dtypes.bfloat16)
                          .astype(np.float32)[1:])
    assert np.array_equal(tensor[1:], x.T[1:])
    streams = k["transposes"].trace(x)[0].program().streams
    assert [type(i).__name__ for i in streams["vector"]].count("Transpose") == 2
    assert [type(i).__name__ for i in streams["tensor"]].count("Transpose") == 1


def test_nc_transpose_on_the_vector_engine_is_bounded(k):
    with pytest.raises(knki.NkiError, match=r"size of dimension 0 in 'data\[33, 8\]' of "
                       r"'nc_transpose' exceed architecture limitation of 32"):
        k["transposes"](np.zeros((33, 8), np.float32))

def test_memset(k):
    x = np.random.default_rng(1).standard_normal((128, 256)).astype(np.float32)
    assert _err(k["memset_tile"](x), x.astype(np.float64) + 1.5) <= FP32


def test_partition_reduce(k, seed):
    x = np.random.default_rng(seed).standard_normal((128, 3, 100)).astype(np.float32)
    s, m, n = k["partition_reduce"](x)
    x64 = x.astype(np.float64)
    assert _err(s, x64.sum(0, keepdims=True)) <= FP32 * 128
    assert np.array_equal(m, x.max(0, keepdims=True))
    assert np.array_equal(n, x.min(0, keepdims=True))


def test_shared_constant(k):
    x = np.random.default_rng(2).standard_normal((128, 64)).astype(np.float32)
    want = x.astype(np.float64) + np.arange(128)[:, None] * 0.25
    assert _err(k["constant_plus"](x), want) <= FP32


def test_scalar_tensor_tensor(k, seed):
    rng = np.random.default_rng(seed)
    x, y = (rng.standard_normal((128, 200)).astype(np.float32) for _ in range(2))
    col = rng.standard_normal((128, 1)).astype(np.float32)
    a, b = k["stt"](x, col, y)
    x64, y64, c64 = (v.astype(np.float64) for v in (x, y, col))
    assert _err(a, (c64 - x64) * y64) <= FP32
    assert _err(b, np.maximum(x64, c64) - y64) <= FP32


def test_tensor_tensor_scan(k, seed):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 1.0, (128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    init = rng.standard_normal((128, 1)).astype(np.float32)
    out, out_bf16 = k["scan"](a, b, init)
    for start, got, tol in ((init[:, 0], out, FP32 * 64),
                            (np.full(128, 0.5), out_bf16, kernels.TOLERANCE["bf16"])):
        want = np.empty((128, 64))
        prev = start.astype(np.float64)
        for i in range(64):
            prev = a[:, i] * prev + b[:, i]
            want[:, i] = prev
        assert got.dtype == (np.float32 if got is out else ml_dtypes.bfloat16)
        assert _err(got, want) <= tol


def test_tensor_tensor_scan_reversed_operands(k, seed):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.0, 1.0, (128, 300)).astype(np.float32)
    b = rng.standard_normal((128, 300)).astype(np.float32)
    out, out2 = k["scan_reversed"](a, b)
    r, s = np.ones(128), np.zeros(128)
    want_r, want_s = np.empty((128, 300)), np.empty((128, 300))
    for i in range(300):
        r = np.maximum(r - a[:, i], b[:, i])
        s = b[:, i] - a[:, i] * s
        want_r[:, i], want_s[:, i] = r, s
    assert _err(out, want_r) <= FP32 * 300
    assert _err(out2, want_s) <= FP32 * 300


@pytest.mark.parametrize("n, dtype", [(1, np.float32), (512, np.float32),
                                      (700, np.float32), (300, ml_dtypes.bfloat16)])
def test_partition_broadcast(k, seed, n, dtype):
    """A one-partition tile broadcast across 128 partitions (in PSUM, or copied to SBUF
    beyond one bank or in another format): every partition the row, bit for bit."""
    rng = np.random.default_rng(seed)
    row = rng.standard_normal((1, n)).astype(dtype)
    x = rng.standard_normal((128, n)).astype(np.float32)
    out, prod = k["partition_broadcast"](row, x)
    assert out.dtype == dtype
    assert np.array_equal(out.view(np.uint8), np.broadcast_to(row, (128, n)).view(np.uint8))
    assert _err(prod, x.astype(np.float64) * row.astype(np.float64)) <= FP32


def test_partition_broadcast_ones_are_made_once(k):
    """The ones stationary is a compile-time constant: the kernel's two broadcasts of the
    row read one tile of ones, filled by a single memset."""
    row = np.ones((1, 512), np.float32)
    x = np.ones((128, 512), np.float32)
    tracer = k["partition_broadcast"].trace(row, x)[0]
    program = tracer.program()
    memsets = [i for s in program.streams.values() for i in s if isinstance(i, Memset)]
    loads = [i for s in program.streams.values() for i in s if isinstance(i, LoadStationary)]
    assert len(memsets) == 1 and memsets[0].value == 1.0
    assert len(loads) == 2 and loads[0].src == loads[1].src == memsets[0].dst


def test_bn_stats_layout(k, seed):
    x = (np.random.default_rng(seed).standard_normal((128, 301)) * 3 + 1).astype(np.float32)
    out = k["stats"](x)
    for h, n in ((0, 151), (1, 150)):
        part = x[:, h::2].astype(np.float64)
        mean = part.mean(1)
        assert np.array_equal(out[:, 3 * h], np.full(128, n))
        assert _err(out[:, 3 * h + 1], mean) <= FP32 * 10
        assert _err(out[:, 3 * h + 2], ((part - mean[:, None]) ** 2).sum(1)) <= FP32 * 10


def test_bn_stats_and_aggr(k, seed):
    x = (np.random.default_rng(seed).standard_normal((128, 999)) * 3 + 1).astype(np.float32)
    out = k["mean_var"](x)
    x64 = x.astype(np.float64)
    assert _err(out[:, 0], x64.mean(1)) <= kernels.POLYNOMIAL
    assert _err(out[:, 1], x64.var(1)) <= kernels.POLYNOMIAL


def test_index_expressions_over_two_axes(k, seed):
    x = np.random.default_rng(seed).standard_normal((128, 35)).astype(np.float32)
    got = k["swap_blocks"](x, 5, 7)
    want = x.reshape(128, 5, 7).transpose(0, 2, 1).reshape(128, 35)
    assert np.array_equal(got, want)


def test_reductions_along_some_free_axes(k, seed):
    x = np.random.default_rng(seed).standard_normal((64, 6, 9)).astype(np.float32)
    sums, tops = k["window_stats"](x, 3)
    win = x.astype(np.float64).reshape(64, 2, 3, 3, 3)
    assert _err(sums, win.sum(axis=(2, 4))) <= FP32 * 9
    assert np.array_equal(tops, x.reshape(64, 2, 3, 3, 3).max(axis=(2, 4)))


def test_loop_reduce_folds_into_its_destination(k, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((384, 128)).astype(np.float32)
    b = rng.standard_normal((384, 200)).astype(np.float32)
    got = k["blocked_sum"](a, b)
    ref = a.astype(np.float64).T @ b.astype(np.float64)
    assert _err(got, ref) <= kernels.TOLERANCE["fp32"] * 384


@pytest.mark.parametrize("name, message", [
    ("loop_reduce_unassigned", r"indexing.py:\d+: nl.loop_reduce whose result is not "
                               r"assigned into a tile is not supported yet"),
    ("out_of_bound_expression", r"indexing.py:\d+: Out-of-bound access for tensor `\w+` on "
                                r"dimension 1: index range \[0, 18\] exceed dimension size of "
                                r"16"),
])
def test_index_and_loop_reduce_errors(k, name, message):
    with pytest.raises(knki.NkiError, match=message):
        k[name](np.zeros((128, 16), np.float32))


def test_a_cast_to_int8_rounds_half_to_even_and_saturates(k):
    x = np.array([[2.5, 3.5, -2.5, -0.4, 0.6, 127.4, 127.6, 300.0, -128.6, -1e9, np.nan,
                   np.inf]], np.float32).repeat(4, axis=0)
    want = [2, 4, -2, 0, 1, 127, 127, 127, -128, -128, 0, 127]
    assert k["to_int8"](x).tolist() == [want] * 4


@pytest.mark.parametrize("keep_half", [False, True])
def test_stream_shuffle_moves_partitions_within_quadrants(k, keep_half, seed):
    """In place, each quadrant's partition i takes its i - 1; a one-partition source
    broadcast over a quadrant, entries of 255 leaving their partitions; the bits as they
    are; one vector instruction of the ISA; NKI 0.2's form the same program."""
    x = np.random.default_rng(seed).standard_normal((128, 48)).astype(np.float32)
    x[3, 0] = np.float32("nan")
    rotated, spread = k["shuffled"](x, keep_half)
    order = [32 * (p // 32) + (p % 32 - 1) % 32 for p in range(128)]
    assert np.array_equal(rotated.view(np.uint32), x[order].view(np.uint32))
    want = np.full_like(x, -1)
    want[0:32] = x[0]
    if keep_half:
        want[1:32:2] = -1
    assert np.array_equal(spread, want)
    listing = _listing(k["shuffled"], x, keep_half)
    assert sum(line.startswith("vector: shuffle ") for line in listing) == 2
    assert listing == _listing(k["v2_shuffled"], x, keep_half)


def _listing(kernel, *args) -> list[str]:
    program = kernel.trace(*args)[0].program()
    return [f"{s}: {format_instruction(i)}" for s in sorted(program.streams)
            for i in program.streams[s]]


def test_max8_find_index8_match_replace8(k, seed):
    """numpy's: the 8 largest, repeats kept; the first place of each; each replaced where
    it first occurs in what is left (a repeated value's second copy goes to its second
    place), as the documentation's numpy equivalent does."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 40, (128, 96)).astype(np.float32)  # many repeats
    top, where, replaced, places = k["top8"](x, -1.0)
    want = -np.sort(-x, axis=1)[:, :8]
    assert np.array_equal(top, want)
    assert np.array_equal(where, np.array([[np.flatnonzero(r == v)[0] for v in w]
                                           for r, w in zip(x, want, strict=True)]))
    data, idx = x.copy(), np.zeros((128, 8), np.uint32)
    for p in range(128):
        for j in range(8):
            hit = np.flatnonzero(data[p] == want[p, j])[0]
            idx[p, j], data[p, hit] = hit, -1.0
    assert np.array_equal(replaced, data) and np.array_equal(places, idx)


def test_rand_and_dropout_draw_from_the_generators(k, seed):
    """nl.rand: uniform in [0, 1), new numbers each time; dropout zeroes about its
    probability's share (0.25, and one probability per partition), all at 1, none at 0."""
    rng = np.random.default_rng(seed)
    x = (rng.random((128, 512)) + 1).astype(np.float32)  # no zeros of its own
    prob = np.repeat([[0.0], [0.5], [0.9], [1.0]], 32, axis=0).astype(np.float32)
    r1, r2, d, dp, d0, d1 = k["draws"](x, prob)
    for r in (r1, r2):
        assert r.min() >= 0 and r.max() < 1 and abs(r.mean() - 0.5) < 0.01
    assert not np.array_equal(r1, r2)
    assert abs((d == 0).mean() - 0.25) < 0.02 and np.array_equal(d[d != 0], x[d != 0])
    for q in range(4):
        assert abs((dp[32 * q:32 * (q + 1)] == 0).mean() - prob[32 * q, 0]) < 0.02
    assert np.array_equal(d0, x) and not d1.any()


def test_rand2_is_uniform_in_its_range(k, seed):
    """nisa.rand2 on trn3: within [min, max] (numbers, one pair a partition, a tile and a
    number, into fp32 and bf16), each tenth of the range holding
    about a tenth of the draws; trn2 has no rand2."""
    rng = np.random.default_rng(seed)
    lo = rng.uniform(-3, 0, (128, 1)).astype(np.float32)
    hi = (lo + rng.uniform(0.5, 2, (128, 1))).astype(np.float32)
    plain, rows, mixed = k["v2_uniforms"](lo, hi, platform_target="trn3")
    for got, a, b in ((plain, -2.0, 3.0), (rows, lo, hi)):
        assert np.all(got >= a) and np.all(got <= b)  # u * (b - a) + a may round to b
        share = np.minimum(np.floor((got - a) / (b - a) * 10), 9)
        counts = np.bincount(share.astype(int).ravel(), minlength=10)
        assert np.all(np.abs(counts / got.size - 0.1) < 0.01), counts
    wide = mixed.astype(np.float32)
    assert np.all(wide >= lo.astype(ml_dtypes.bfloat16).astype(np.float32) - 1e-6)
    assert np.all(wide <= 4.0) and abs(np.mean((wide - lo) / (4.0 - lo)) - 0.5) < 0.02
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: 'rand2' is "
                                            r"NeuronCore-v4's"):
        k["v2_uniforms"](lo, hi, platform_target="trn2")


def test_power_runs_on_gpsimd(k, seed):
    """nl.power and tensor_tensor's op nl.power against numpy: a tile raised to a tile is
    numpy's float64 power rounded to fp32 (within an ulp of numpy's float32 power), to 2.0
    the fp32 square, into bf16 as ml_dtypes rounds; every power on GpSimd, as NKI says it
    runs, and refused on the vector engine."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.1, 4.0, (128, 64)).astype(np.float32)
    y = rng.uniform(-3.0, 3.0, (128, 64)).astype(np.float32)
    both, squared, narrow = k["v2_powers"](x, y)
    want = np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    assert np.array_equal(both, want)
    assert np.all(np.abs(both.view(np.int32) - np.power(x, y).view(np.int32)) <= 1)
    assert np.array_equal(squared, x * x)
    assert np.array_equal(narrow.view(np.uint16), want.astype(ml_dtypes.bfloat16).view(np.uint16))
    streams = k["v2_powers"].trace(x, y)[0].program().streams
    powers = [i for i in streams["gpsimd"] if VectorOp.POWER in (getattr(i, "op", None),
                                                                 getattr(i, "op0", None))]
    assert len(powers) == 3
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: 'tensor_tensor' runs on the "
                                            r"gpsimd engine, not vector"):
        k["v2_powers"](x, y, engine=knki.isa.engine.vector)


def test_the_unary_alu_operators(k, seed):
    """rsqrt (GpSimd's: 1 / sqrt in float64 rounded to fp32), relu (max with 0) and
    reciprocal (the vector engine's IEEE division) as tensor_scalar's op0, against numpy;
    rsqrt on GpSimd, refused on the vector engine."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((128, 64)) * 3).astype(np.float32)
    roots, relus, thirds = k["v2_unary_operators"](x)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = (1 / np.sqrt(x.astype(np.float64))).astype(np.float32)
    assert np.array_equal(roots, want, equal_nan=True) and np.isnan(roots[x < 0]).all()
    assert np.array_equal(relus, np.maximum(x, np.float32(0)))
    assert np.array_equal(thirds, (np.float32(1) / x) * np.float32(3))
    streams = k["v2_unary_operators"].trace(x)[0].program().streams
    assert [getattr(i, "op0", None) for i in streams["gpsimd"]].count(VectorOp.RSQRT) == 1
    assert [getattr(i, "op0", None) for i in streams["vector"]].count(
        VectorOp.RECIPROCAL) == 1
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: 'tensor_scalar' runs on the "
                                            r"gpsimd engine, not vector"):
        k["v2_unary_operators"](x, engine=knki.isa.engine.vector)


def test_gather_flattened(k, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, 4, 16)).astype(np.float32)
    idx = rng.integers(0, 64, (128, 10)).astype(np.uint32)
    assert np.array_equal(k["gathered"](x, idx),
                          np.take_along_axis(x.reshape(128, 64), idx.astype(np.int64), axis=1))


def test_tensor_copy_dynamic_src(k, seed):
    """Columns at offsets read when each copy runs: numpy's take; an offset past the
    tensor is the core's error naming it; each copy takes at least the spec's dynamic
    interval on the vector engine."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, 300)).astype(np.float32)
    offsets = rng.integers(0, 300, (1, 16)).astype(np.int32)
    assert np.array_equal(k["columns_at"](x, offsets), x[:, offsets[0]])
    run = knki.SESSION.launches[-1]
    p = knki.launch.params_for("trn1")
    assert run.result.busy["vector"] >= 16 * p.dynamic_interval / p.clock("vector")
    offsets[0, 5] = 300
    with pytest.raises(knki.NkiError, match=r"isa_more.py:\d+: .*dynamic offset: 300 is not "
                                            r"one of 0 \.\. 299"):
        k["columns_at"](x, offsets)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_sequence_bounds(k, dtype, seed):
    """Each run of equal ids is a segment from its first place to one past its last;
    padding (0) gets N and -1: worked out run by run."""
    rng = np.random.default_rng(seed)
    ids = np.repeat(rng.integers(0, 4, 24), rng.integers(1, 5, 24))[:64]
    ids = np.pad(ids, (0, 64 - ids.size)).astype(dtype).reshape(1, 64)
    want = np.empty((2, 64))
    at = 0
    for value, run in itertools.groupby(ids[0]):
        n = len(list(run))
        want[:, at:at + n] = [[64], [-1]] if value == 0 else [[at], [at + n]]
        at += n
    assert np.array_equal(k["bounds"](ids)[0], want.astype(dtype))


def test_range_select_and_its_register(k, seed):
    """numpy's where over the places start + i in [lo, hi); the row maxima; the register
    accumulating two more selections' maxima (of x + 1 and x + 2); refused before
    NeuronCore-v3, at the kernel's line."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, 200)).astype(np.float32)
    lo = rng.integers(32, 100, (128, 1)).astype(np.float32)
    hi = lo + rng.integers(1, 100, (128, 1)).astype(np.float32)
    sel, best, chained = k["ranges"](x, lo, hi, 32)
    place = 32 + np.arange(200)
    want = np.where((place >= lo) & (place < hi), x, np.finfo(np.float32).min)
    assert np.array_equal(sel, want)
    assert np.array_equal(best, want.max(axis=1, keepdims=True))
    keep = (place >= lo) & (place < hi)
    assert np.array_equal(chained, np.where(keep, x + np.float32(2), -np.inf)
                          .max(axis=1, keepdims=True).astype(np.float32))
    with pytest.raises(knki.NkiError, match=r"isa_more.py:\d+: .*NeuronCore-v2\) has no "
                                            r"range select"):
        k["ranges_on_trn1"](x, lo, hi)


def test_range_select_under_a_mask_writes_the_kept_rows_of_reduce_res(k, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, 200)).astype(np.float32)
    lo = rng.integers(0, 100, (128, 1)).astype(np.float32)
    hi = lo + rng.integers(1, 100, (128, 1)).astype(np.float32)
    sel, best = k["masked_ranges"](x, lo, hi)
    place = np.arange(150)
    chosen = np.where((place >= lo[32:64]) & (place < hi[32:64]), x[32:64, :150],
                      np.finfo(np.float32).min)
    want = x.copy()
    want[32:64, :150] = chosen
    assert np.array_equal(sel, want)
    want_best = np.full((128, 1), 7.0, np.float32)
    want_best[32:64] = chosen.max(axis=1, keepdims=True)
    assert np.array_equal(best, want_best)


def test_tensor_scalar_cumulative(k, seed):
    """The documentation's pseudocode, worked in float32 element by element: a running sum
    from 0, a running maximum from a loaded start, and a sum continued from the last
    one's register (the maximum's last column)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, 40)).astype(np.float32)
    init = rng.standard_normal((128, 1)).astype(np.float32)
    got = k["cumulative"](x, init, np.ones((1, 1), np.float32))
    want = [np.empty_like(x) for _ in range(3)]
    for p in range(128):
        reg = np.float32(0)
        for i in range(40):
            reg = want[0][p, i] = reg + x[p, i] * np.float32(2)
        reg = init[p, 0]
        for i in range(40):
            reg = want[1][p, i] = max(reg, x[p, i] + np.float32(1))
        for i in range(40):
            reg = want[2][p, i] = reg + x[p, i] * np.float32(2)
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g, w)


def test_dma_transpose_of_an_on_chip_tile(k, seed):
    x = np.random.default_rng(seed).standard_normal((96, 128)).astype(np.float32)
    assert np.array_equal(k["transposed_on_chip"](x), x.T)


def test_isa_constants_import():
    with knki.installed():
        from neuronxcc.nki.isa.constants import dge_mode, oob_mode
        from nki.isa.constants import reduce_cmd
    assert dge_mode.hwdge and oob_mode.skip and reduce_cmd.load_reduce == 4


@pytest.mark.parametrize("per, valid", [(1, 40), (4, 64)])
def test_local_gather(k, per, valid, seed):
    """Each group of 16 partitions reads its own indices partition first and gathers
    ``per`` elements from each, as the documentation's numpy semantics do."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    index = (rng.integers(0, 96 // per, (64, 4)) * per).astype(np.uint16)
    out = k["gathered_locally"](x, index, per, valid)
    for g in range(0, 64, 16):
        starts = index[g:g + 16].flatten(order="F")[:valid].astype(np.int64)
        take = (starts[:, None] + np.arange(per)).reshape(-1)
        assert np.array_equal(out[g:g + 16].reshape(16, -1), x[g:g + 16][:, take])
    np.testing.assert_array_equal(k["v2_gathered_locally"](x, index, per, valid), out)


def test_uint16_by_value(k, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 40000, (2, 128, 32)).astype(np.uint16)
    want = np.minimum(a.astype(np.int64) + b, 65535).astype(np.uint16)
    assert np.array_equal(k["uint16_sum"](a, b), want)


def test_access_patterns_in_hbm_and_on_chip(k):
    """NKI 0.2's ``.ap``: a pattern over an HBM tensor's storage reads it transposed, one
    over a tile from an element offset reads every second column from column 1."""
    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    np.testing.assert_array_equal(k["v2_through_patterns"](x), x.T[:, 1::2])


def test_an_access_pattern_past_its_storage_is_refused(k):
    with pytest.raises(knki.NkiError, match=r"\.ap\(\[\[8, 16\], \[1, 8\]\], offset=1\) of "
                                             r"`\w+` reaches elements 1 \.\. 128, outside "
                                             r"its 128 elements"):
        k["v2_past_its_storage"](np.zeros((16, 8), np.float32))


def test_a_gather_from_an_offset_checks_each_index_as_it_runs(k):
    """Rows gathered by an index tile from an element offset (nki-library's block-parallel MoE
    writes each core's half of its output so): the rows an index may name are those that
    stay within the tensor, and an index past them is the DMA's out-of-bounds error when it
    runs [NKI ``dma_copy``: "out-of-bound address checking is turned on automatically during
    execution"], not a refusal of the pattern."""
    x = np.arange(128, dtype=np.float32).reshape(16, 8)
    rows = np.array([[0], [3], [14], [2]], np.uint32)
    got = k["v2_gathered_past_storage"](x, rows)
    np.testing.assert_array_equal(got, x.reshape(-1)[1 + 8 * rows + np.arange(8)])
    with pytest.raises(IndexError, match="is out of bounds"):
        k["v2_gathered_past_storage"](x, np.array([[0], [15], [1], [2]], np.uint32))


def test_nki_0_2_kernel_classes_and_is_transpose(k):
    """A kernel's NKIObject subclass is a plain class, ``nki.dtype`` a type its annotations
    name; nc_matmul(is_transpose=True) of a tile by an identity is its transpose: from
    NeuronCore-v3 into PSUM of the tile's type the array's transpose mode, bit for bit (NaN
    and infinity kept: "bit-accurate data transpose"); on trn1 (NeuronCore-v2) a product,
    whose PSUM is fp32."""
    assert k["v2_Tiles"](4).rows == 4
    assert k["v2_typed"]() == np.float32
    x = np.random.default_rng(7).integers(-8, 8, (64, 32)).astype(np.float32)
    np.testing.assert_array_equal(k["v2_transposed_by_matmul"](x), x.T)
    from kernels.nki import language as nl

    b = x.astype(ml_dtypes.bfloat16)
    b[3, 5], b[7, 1] = np.nan, -np.inf
    out = k["v2_transposed_by_matmul"](b, into=nl.bfloat16, platform_target="trn2")
    np.testing.assert_array_equal(out.view(np.uint16), b.T.view(np.uint16))
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: 'nc_matmul' writes fp32 to "
                                            r"PSUM on trn1, not bf16"):
        k["v2_transposed_by_matmul"](b, into=nl.bfloat16, platform_target="trn1")


def test_a_documented_call_not_implemented_is_refused_where_called(k):
    """A module may name nl.random_seed (NKI documents it; trngen does not implement it):
    the refusal comes where the kernel calls it."""
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: nl.random_seed is not "
                                            r"supported yet"):
        k["v2_calls_random_seed"](np.zeros((8, 8), np.float32))
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: nisa.topk is "
                                            r"not supported yet"):
        k["v2_calls_topk"](np.zeros((8, 8), np.float32))


def test_access_patterns_with_run_time_offsets(k):
    """``.ap(vector_offset=)`` gathers the rows a tile of indices names (NKI 0.2's indirect
    gather); ``.ap(scalar_offset=, indirect_dim=1)`` reads the element of a row at a column
    a tile holds, the tile's element at partition 5 (a DMA reads its index from any
    partition)."""
    rng = np.random.default_rng(8)
    data = rng.standard_normal((40, 24)).astype(np.float32)
    idx = rng.integers(0, 40, (32, 1)).astype(np.uint32)
    np.testing.assert_array_equal(k["v2_gathered_by_pattern"](data, idx), data[idx[:, 0]])
    col = np.array([[0], [1], [2], [3], [4], [17], [6], [7]], dtype=np.int32)
    np.testing.assert_array_equal(k["v2_element_at"](data, col), data[3:4, 17:18])


def test_tiles_placed_by_address_in_an_unrolled_loop(k):
    """NKI 0.2's ``nl.ndarray(address=(partition, byte))``: its loops unroll, so each
    iteration's tile is its own (the three results differ by their iteration); a PSUM
    address counts bytes across banks."""
    x = np.arange(128 * 16, dtype=np.float32).reshape(128, 16)
    out = k["v2_placed_by_address"](x)
    np.testing.assert_array_equal(out, x[None] + np.arange(3, dtype=np.float32)[:, None, None])


def test_iota_of_a_pattern_that_is_not_row_major(k):
    """NKI 0.2's iota pattern [[0, 2], [7, 3], [-2, 5]]: value 1 + 100 p + 7 j - 2 k at
    [p, i, j, k], whatever i (the kernel returns its output reshaped to that)."""
    p, i, j, kk = np.ogrid[0:4, 0:2, 0:3, 0:5]
    want = np.broadcast_to(1 + 100 * p + 7 * j - 2 * kk + 0 * i, (4, 2, 3, 5))
    np.testing.assert_array_equal(k["v2_iota_any_pattern"](), want)


def test_nc_n_gather_within_each_partition(k):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 4, 8)).astype(np.float32)
    idx = rng.integers(0, 32, size=(16, 12)).astype(np.uint32)
    out = k["v2_gathered_in_partitions"](x, idx)
    np.testing.assert_array_equal(out, np.take_along_axis(x.reshape(16, 32), idx.astype(int),
                                                          axis=1))


def test_cores_of_a_grid_may_stage_through_hbm_of_their_own(k):
    """An nl.nc(2) launch whose cores make different HBM scratch (an on-chip dma_transpose
    on one of them, as attention_cte's unequal split of a sequence does) runs; cores that
    make different shared_hbm tensors are refused."""
    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    grid = k["v2_staged_on_one_core"][knki.language.nc(2)]
    out = grid(x, platform_target="trn2")
    np.testing.assert_array_equal(out[:32], x[:32].T)
    np.testing.assert_array_equal(out[32:], x[32:])
    with pytest.raises(knki.NkiError, match="instances on different cores make different "
                                            "HBM tensors is not supported yet"):
        grid(x, shared_too=True, platform_target="trn2")


def test_dma_copy_of_one_element_of_a_partition(k):
    x = np.array([[1.0, 2.0], [3.5, 4.0]], dtype=np.float32)
    out = k["v2_one_element"](x)
    np.testing.assert_array_equal(out[:, 0], [3.5] + [0.0] * 15)


def test_unary_abs_in_tensor_scalar_reduce(k):
    """tensor_scalar's arithmetic unary operators take operand 0 ("Must be None or 0 when
    op0 is a unary operator (e.g., nl.abs)"): |x| and each row's largest, against numpy."""
    x = np.random.default_rng(0).standard_normal((32, 24)).astype(np.float32)
    out = k["v2_abs_max_rows"](x)
    np.testing.assert_array_equal(out[:, :24], np.abs(x))
    np.testing.assert_array_equal(out[:, 24], np.abs(x).max(axis=1))


def test_ap_reads_a_tiles_bytes_as_a_narrower_type(k):
    x = np.array([[1.5], [-2.0], [3e-5], [np.pi]] * 8, dtype=np.float32)
    out = k["v2_bytes_as_fp8"](x)
    np.testing.assert_array_equal(out.view(np.uint8), x.view(np.uint8).reshape(32, 4))


def test_library_names_on_one_core(k, tmp_path):
    """core_barrier on one core, nisa.matmul_perf_mode and dge_mode (also from
    nki.isa.constants), nt.mutable_tensor, nl.shared_constant of a .npy path; an .ap past
    its tile is refused only where an instruction uses it."""
    x = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    table = np.full((16, 8), 0.5, dtype=np.float32)
    np.save(tmp_path / "table.npy", table)
    out = k["v2_barrier_and_names"](x, str(tmp_path / "table.npy"))
    np.testing.assert_array_equal(out, x + table)
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: .*\.ap\(\[\[8, 16\], "
                                           r"\[1, 8\]\], offset=8\) reaches past the 16 x 8 "
                                           r"tile"):
        k["v2_barrier_and_names"](x, str(tmp_path / "table.npy"), use_past_tile=True)


@pytest.mark.parametrize("chip", ["trn1", "trn2"])
def test_tile_sizes_of_the_target_chips_memories(k, chip):
    """NKI 0.2's nl.tile_size sizes of SBUF and PSUM are the target chip's (its spec's core),
    per partition where NKI documents them so."""
    from hdl.params import core_params
    from specs.loader import load

    p = core_params(load(chip))
    k["v2_chip_sizes"](np.zeros((4, 4), np.float32), platform_target=chip)
    assert k["v2_SIZES"] == {"pmax": 128, "psum_bank_fmax": 512,
                             "psum_num_banks": p.psum_banks,
                             "sbuf_size_bytes": p.partitions * p.sbuf_bytes,
                             "sbuf_fmax": p.sbuf_bytes // 4, "sbuf_fmax_bytes": p.sbuf_bytes,
                             "total_available_sbuf_size": p.sbuf_bytes}


def test_dma_copy_between_two_types_casts_through_fp32(k):
    """"The conversion is performed through a two-step process: first casting from
    src.dtype to float32, then from float32 to dst.dtype" (nki.isa.dma_copy): against
    ml_dtypes' bf16 (nearest even) and numpy's nearest integers (ties to even)."""
    x = (np.arange(128 * 8, dtype=np.float32).reshape(128, 8) - 500) * np.float32(0.75)
    x[0, :4] = [2.5, 3.5, -0.5, 1.00390625]
    out = k["v2_cast_by_dma"](x)
    np.testing.assert_array_equal(out[0], x.astype(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_array_equal(out[1], np.rint(x))


def test_matmuls_left_to_the_compiler_start_a_sum_where_the_last_was_read(k):
    """NKI 0.2's inferred accumulate flag ("first write overwrites, subsequent writes
    accumulate") with a PSUM tensor for each group at one address: each group's result is
    its own two products, not the groups before it too."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((32, 16)).astype(np.float32)
    b = rng.standard_normal((3, 32, 8)).astype(np.float32)
    out = k["v2_groups_at_one_bank"](a, b)
    want = 2 * np.einsum("km,gkn->gmn", a.astype(np.float64), b.astype(np.float64))
    assert _err(out, want) < FP32


def test_a_kernel_class_fields_without_annotations(k):
    s = k["v2_Section"](index=2)
    assert (s.index, s.offset) == (2, 0)


def test_the_shared_identity_matrix_of_each_generation(k):
    """NKI 0.2 documents nl.shared_identity_matrix as a tile in SBUF (0.1 as an HBM constant,
    which tests/nki_kernels/composed.py loads): a kernel importing nki.isa gets the tile."""
    np.testing.assert_array_equal(k["v2_identity_in_sbuf"](np.zeros((64, 1), np.float32)),
                                  np.identity(64, dtype=np.float32))


def test_the_truth_of_a_tile_in_each_generation(k):
    """NKI 0.2 resolves every branch at specialization time and its library tests optional
    tiles with ``if tile:``: a tile is true. In 0.1 a tile's truth is its values', which
    NKI refuses (err_ambiguous_tensor_truth_value)."""
    x = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    np.testing.assert_array_equal(k["v2_optional_bias"](x, True), x + 1)
    np.testing.assert_array_equal(k["v2_optional_bias"](x, False), x)
    with pytest.raises(knki.NkiError, match=r"isa_more.py:\d+: .*truth value of a tensor is "
                                            r"ambiguous"):
        k["tile_truth"](x)


def test_a_kernel_that_asks_for_its_grid_and_collectives(k):
    """nl.num_programs(0) and program_id(0) on a grid of one and of two programs; without a
    grid, NKI's error with the launch to use; nki.collectives imports and its calls are
    refused where made."""
    x = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    np.testing.assert_array_equal(k["v2_sharded_copy"][1](x), x)
    np.testing.assert_array_equal(k["v2_sharded_copy"][2](x), x)
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: num_programs\(0\) of a launch "
                                            r"grid of 0 dimensions .*kernel\[1\]"):
        k["v2_sharded_copy"](x)
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: nki.collectives.all_gather "
                                            r"is not supported yet"):
        k["v2_sharded_copy"][1](x, gather=True)


def test_a_pattern_of_many_partitions_moved_by_one_run_time_index(k):
    """``.ap(scalar_offset=)`` over many partitions, read and written: the whole pattern
    moves by the tile's value times the stride of ``indirect_dim`` [NKI-AP's example: A of
    [512, 512] read at 3 x 128 rows]; an index that would reach past the tensor is refused
    when the copy runs, or with ``oob_mode.skip`` moves nothing."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((512, 512)).astype(np.float32)
    np.testing.assert_array_equal(k["v2_rows_at_run_time"](a, 3 * 128), a[384:, :256])
    np.testing.assert_array_equal(k["v2_rows_at_run_time"](a, 5), a[5:133, :256])
    x = rng.standard_normal((16, 8)).astype(np.float32)
    want = np.zeros((16, 64), np.float32)
    want[:, 40:48] = x
    np.testing.assert_array_equal(k["v2_columns_written_at_run_time"](x, 40), want)
    want = np.zeros((16, 64), np.float32)
    want[:, 56:] = x  # the last column the pattern may start at
    np.testing.assert_array_equal(k["v2_columns_written_at_run_time"](x, 56), want)
    with pytest.raises(IndexError, match=r"index 57 reaches outside the tensor \(it takes "
                                         r"0 \.\. 56\)"):
        k["v2_columns_written_at_run_time"](x, 57)
    np.testing.assert_array_equal(k["v2_columns_written_at_run_time"](x, 57, skip=True),
                                  np.zeros((16, 64), np.float32))


def test_the_view_methods_of_nki_0_2(k):
    """slice, select (static and at a run-time index), vector_select, reshape_dim, permute,
    rearrange, expand_dim, broadcast, flatten_dims, and the strides, offset, pattern and
    contiguity the kernel asserts, against numpy."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((128, 24)).astype(np.float32)
    hbm3 = rng.standard_normal((4, 128, 8)).astype(np.float32)
    table = rng.standard_normal((64, 8)).astype(np.float32)
    rows = rng.integers(0, 64, (16, 1)).astype(np.int32)
    out = k["v2_view_methods"](x, hbm3, table, rows)
    turned = x.reshape(128, 4, 6).transpose(0, 2, 1).reshape(128, 24)
    np.testing.assert_array_equal(out[0], turned)
    np.testing.assert_array_equal(out[1], turned)
    np.testing.assert_array_equal(out[2], np.tile(x[:, :6], (1, 4)))
    np.testing.assert_array_equal(out[3], x)
    np.testing.assert_array_equal(out[4][:, :8], x[:, 8:24:2])
    for slot, block in ((5, 2), (6, 3)):
        np.testing.assert_array_equal(out[slot][:, :8], hbm3[block])
        assert not out[slot][:, 8:].any()
    np.testing.assert_array_equal(out[7][:16, :8], table[rows[:, 0]])
    np.testing.assert_array_equal(out[8][:, :6], x.reshape(128, 4, 6)[:, 3])


def test_bypass_stages_and_the_names_of_nki_0_2(k):
    x = np.random.default_rng(12).standard_normal((32, 16)).astype(np.float32)
    out = k["v2_bypassed"](x)
    np.testing.assert_array_equal(out[0], x + np.float32(2))
    np.testing.assert_array_equal(out[1], x * np.float32(3))
    np.testing.assert_array_equal(out[2], x)


def test_each_core_keeps_its_own_private_hbm_across_a_meeting(k):
    """nl.private_hbm is each core's own: what a core wrote there before a barrier is what it
    reads after, not the other core's (the two tensors share a place in the launch's one
    HBM image)."""
    nl = knki.language
    x = np.random.default_rng(41).standard_normal((64, 8)).astype(np.float32)
    out = k["v2_private_across_a_barrier"][nl.nc(2)](x, platform_target="trn2")
    np.testing.assert_array_equal(out, x * np.repeat([1.0, 2.0], 32)[:, None].astype(np.float32))


def test_the_cores_of_a_grid_meet_at_a_barrier_and_exchange_tiles(k):
    """core_barrier across an nl.nc(2) grid's cores: each core reads the half the other
    wrote before it; sendrecv: each core's dst takes the other's src. Each is a place where
    both cores' instructions before end before any after start, the exchange a DMA between
    the cores' SBUF; the launch's time is the phases' and the exchanges'. Two cores' DMAs of
    the same HBM bytes between meetings, one writing, are refused at the writer's line (a
    DMA at a run-time index where its index put it)."""
    nl = knki.language
    x = np.random.default_rng(13).standard_normal((64, 8)).astype(np.float32)
    out, out2 = k["v2_halves_then_barrier"][nl.nc(2)](x, platform_target="trn2")
    np.testing.assert_array_equal(out, 2 * x)
    np.testing.assert_array_equal(out2, 2 * x)
    assert knki.SESSION.launches[-1].cores == 2
    # without the barrier each core reads what the other writes, unordered: refused
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: core 0's DMA of this line "
                                            r"writes HBM bytes that core 1's DMA of line \d+ "
                                            r"also accesses, with no core_barrier"):
        k["v2_halves_then_barrier"][nl.nc(2)](x, barrier=False, platform_target="trn2")
    # a DMA at a run-time index, where it landed: apart from the other core's write, or on it
    out = k["v2_row_at_an_index"][nl.nc(2)](x, np.array([[2]], np.int32),
                                            platform_target="trn2")
    np.testing.assert_array_equal(out[[0, 2]], x[[1, 0]])
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: core \d's DMA of this line "
                                            r"writes HBM bytes that core \d's DMA of line \d+ "
                                            r"also accesses"):
        k["v2_row_at_an_index"][nl.nc(2)](x, np.array([[0]], np.int32), platform_target="trn2")
    knki.SESSION.trace = True
    try:
        got = k["v2_halves_exchanged"][nl.nc(2)](x, platform_target="trn2")
    finally:
        knki.SESSION.trace = False
    both = x[:32].astype(np.float64) ** 2 + x[32:].astype(np.float64) ** 2
    np.testing.assert_allclose(got, np.hstack([both, both]), rtol=1e-6)
    # the add starts when both cores' squares ended and the exchange (a DMA of 32 x 8 fp32
    # between the cores' SBUF: the DMA rule's latency and transfer) arrived
    from hdl.core.isa import AP
    from kernels.nki.launch import params_for
    from sim.core import dma_seconds

    events = knki.SESSION.launches[-1].result.events
    before = max(e["ts"] + e["dur"] for e in events if e["name"] == "act")
    add = min(e["ts"] for e in events if e["name"] == "tt")
    tile = AP("sbuf", "fp32", 0, 32, 0, ((8, 1),))
    latency, transfer = dma_seconds(params_for("trn2", "full"), tile, tile)
    assert add >= before + (latency + transfer) * 1e6 - 1e-6
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: sendrecv in a launch on "
                                            r"one NeuronCore"):
        k["v2_halves_exchanged"][1](x, platform_target="trn2")
    # GpSimd's DMA: at most 1,024 bytes a partition of 32-bit elements
    wide = np.zeros((64, 512), np.float32)
    k["v2_halves_exchanged"][nl.nc(2)](x, by_gpsimd=True, platform_target="trn2")
    with pytest.raises(knki.NkiError, match=r"by GpSimd's DMA moves at most 1024 bytes a "
                                            r"partition of 32-bit elements, not 2048"):
        k["v2_halves_exchanged"][nl.nc(2)](wide, by_gpsimd=True, platform_target="trn2")


def test_nonzero_with_count_in_each_gpsimd_cores_first_partition(k):
    """nisa.nonzero_with_count on trn2 (NeuronCore-v3) against numpy: partitions 0, 16, ...
    hold the nonzero positions plus the offset, the padding and the count; the others keep
    the memset's zeros; on trn1 the core's rules refuse it at the kernel's line."""
    rng = np.random.default_rng(14)
    x = ((rng.random((128, 40)) < 0.3) * rng.standard_normal((128, 40))).astype(np.float32)
    out = k["v2_nonzeros"](x, 100, platform_target="trn2")
    want = np.zeros((128, 41), np.int32)
    for p in range(0, 128, 16):
        at = np.flatnonzero(x[p])
        want[p] = np.concatenate([at + 100, np.full(40 - at.size, -7), [at.size]])
    np.testing.assert_array_equal(out, want)
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: .*has no nonzero search"):
        k["v2_nonzeros"](x, 0, platform_target="trn1")


def test_dma_compute_sums_in_fp32_and_casts_once(k):
    """nisa.dma_compute against numpy: three sources summed in fp32 (each sum rounded to
    fp32), cast to bf16 once (ml_dtypes); two into HBM; the read-modify-write of a tile."""
    rng = np.random.default_rng(15)
    a, b, c = (rng.standard_normal((32, 24)).astype(np.float32) for _ in range(3))
    out = k["v2_summed_by_dma"](a, b, c)
    want = ((a + b) + c).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(out[0], want)
    np.testing.assert_array_equal(out[1], a + b)
    np.testing.assert_array_equal(out[2], a + b)


@pytest.fixture(scope="module")
def dyn():
    with knki.installed():
        yield runpy.run_path(str(HERE / "dynamic_v2.py"))


def test_fori_loop_over_a_loaded_register(dyn):
    """NKI's fori_loop example against numpy: the register loaded from the kernel's input
    bounds the loop (the program up to the load run to learn it), each iteration's register
    moves the access patterns; more iterations, more instructions and time."""
    from hdl.core.isa import DmaCopy

    data = np.arange(1, 17, dtype=np.float32)[None, :]
    runs = []
    knki.SESSION.keep = True
    try:
        for k in (3, 9):
            out = dyn["first_copied"](data, np.array([[k]], np.int32))
            np.testing.assert_array_equal(out, np.where(np.arange(16) < k, data, 0))
            launch = knki.SESSION.launches[-1]
            runs.append((sum(isinstance(i, DmaCopy) for s in launch.programs[0].streams.values()
                             for i in s), launch.result.time))
    finally:
        knki.SESSION.keep = False
    # the count's load and the zeros' store, then two copies an iteration
    assert [n for n, _ in runs] == [2 + 2 * 3, 2 + 2 * 9] and runs[0][1] < runs[1][1]


def test_while_loop_reloads_its_condition(dyn):
    """NKI's while_loop example: the count decremented on the vector engine and loaded again
    each iteration; the sum of val count times, zero times when the count is zero."""
    val = np.array([[1.25]], np.float32)
    for count in (0, 1, 5):
        out = dyn["added_count_times"](val, np.array([[count]], np.int32))
        np.testing.assert_array_equal(out, val * count)


def test_a_dynamic_loops_body_is_one_stretch_of_code(dyn):
    """nl.dynamic_range against numpy, and against the same loop as an nl.sequential_range:
    the dynamic loop's body makes its tiles once (the SBUF it holds does not grow with the
    count, where the unrolled loop's iterations take fresh tiles), and the instruction
    after the register's load waits for the DMA that wrote its source."""
    from hdl.core.isa import DmaCopy

    x = np.random.default_rng(16).standard_normal((8 * 128, 32)).astype(np.float32)
    places, times = {}, {}
    knki.SESSION.keep = True
    try:
        for loop, count in (("dynamic", np.array([[6]], np.int32)), ("sequential", 6)):
            out = dyn["blocks_doubled"](x, count, loop=loop)
            np.testing.assert_array_equal(out[:6 * 128], 2 * x[:6 * 128])
            launch = knki.SESSION.launches[-1]
            places[loop] = {ins.dst.offset for s in launch.programs[0].streams.values()
                            for ins in s if isinstance(ins, DmaCopy)
                            and ins.dst.space == "sbuf" and ins.dst.partitions == 128}
            times[loop] = launch.result.time
    finally:
        knki.SESSION.keep = False
    # one tile for every iteration's load, where the unrolled loop's land on fresh space; its
    # iterations then wait for each other's use of it
    assert len(places["dynamic"]) == 1 < len(places["sequential"])
    assert times["dynamic"] > times["sequential"]
    knki.SESSION.trace = True
    try:
        dyn["blocks_doubled"](x, np.array([[2]], np.int32))
    finally:
        knki.SESSION.trace = False
    events = sorted(knki.SESSION.launches[-1].result.events, key=lambda e: e["ts"])
    count_load = events[0]
    assert count_load["name"] == "dma"
    assert all(e["ts"] >= count_load["ts"] + count_load["dur"] - 1e-9 for e in events[1:])


def test_a_dynamic_loops_tensors_share_memory_by_their_lives_in_one_iteration(k):
    """A dynamic loop's body is traced once by NKI, its tensors allocated by their lives
    within an iteration: ten PSUM tensors a bank each, one after another, fit PSUM's eight
    banks (held for the whole loop, they did not), and each product is summed right (a
    tensor's write waits for the reads of the one before it in its bank)."""
    rng = np.random.default_rng(43)
    x, w = rng.standard_normal((64, 32)), rng.standard_normal((64, 512))
    out = k["v2_products_summed"](x.astype(np.float32), w.astype(np.float32),
                                  np.array([[3]], np.int32))
    assert _err(out, 30 * x.T @ w) <= 1e-5


def test_a_register_on_a_grid_of_cores_takes_what_the_cores_left_before_the_meeting(dyn):
    """On an nl.nc(2) grid a register core 1 loads from what core 0 wrote before their last
    meeting takes that value (the cores are traced again, each register's run taking the
    other core's program of the trace before, until the values settle), and a dynamic loop
    with a meeting in it runs that many times on both cores."""
    nl = knki.language
    x = np.random.default_rng(47).standard_normal((64, 8)).astype(np.float32)
    out = dyn["counted_by_core_zero"][nl.nc(2)](x, np.array([[3]], np.int32),
                                                platform_target="trn2")
    np.testing.assert_allclose(out, 3 * x, rtol=1e-6)


@pytest.mark.parametrize("how, message", [
    ("float source", r"register_load: src must hold one int32 or uint32 element, not "
                     r"\[1, 1\] fp32"),
    ("python int", r"a register used as a Python integer"),
    ("unset", r"a register read before it holds a value"),
    ("changing body", r"a later iteration of an nl.dynamic_range loop makes the SBUF tensor "
                      r"\[128, 8\] fp32 where the first made \[128, 4\] fp32"),
    ("while returns nothing", r"the body must return the condition register, not NoneType"),
])
def test_registers_are_refused_where_the_hardware_cannot_use_them(dyn, how, message):
    x = np.zeros((128, 4), np.float32)
    with pytest.raises((knki.NkiError, knki.NotSupported), match=message):
        dyn["misuse"](x, np.array([[2]], np.int32), how)


def test_a_register_load_needs_the_kernels_data(dyn):
    from kernels.nki.typing import TensorType

    with pytest.raises(knki.NotSupported, match=r"nisa.register_alloc without the kernel.s "
                                                r"inputs"):
        dyn["first_copied"](TensorType((1, 16), "fp32"), TensorType((1, 1), "int32"))


def test_a_placed_psum_tensor_accumulates_its_own_products(k):
    """A PSUM tensor placed where an earlier one was (nki-library's TKG kernels place theirs
    at a bank each) starts its own accumulation: the earlier tensor's write, read by the
    vector engine, does not end the new tensor's sum (its second product adds), also where
    the earlier tensor was the larger."""
    rng = np.random.default_rng(29)
    x, w = rng.standard_normal((64, 32)), rng.standard_normal((64, 48))
    once, twice = k["v2_placed_sums"](x.astype(np.float32), w.astype(np.float32))
    assert _err(once, x.T @ w) <= 1e-5
    assert _err(twice, 2 * x.T @ w[:, :24]) <= 1e-5


def test_a_placed_psum_tile_holds_its_bank_only_while_it_lives(k):
    """Eight PSUM tensors the compiler places fill PSUM; a tile the kernel places at bank 0
    after them fits (it held its bank for the whole kernel, which was then full), and its
    product is right: its write waited for the reads of the tensor before it there."""
    rng = np.random.default_rng(31)
    x, w = rng.standard_normal((64, 32)), rng.standard_normal((64, 512))
    out = k["v2_placed_after_the_compilers"](x.astype(np.float32), w.astype(np.float32))
    assert _err(out, 9 * x.T @ w) <= 1e-5


def test_the_activation_derivatives_of_moe_backward_passes(k):
    """nl.silu_dx, nl.gelu_apprx_sigmoid (x sigmoid(1.702 x)) and nl.gelu_apprx_sigmoid_dx on
    the Scalar Engine against numpy float64, within the engine's 2^-13 relative error, from
    -100 to 100 and next to the derivatives' zeros (about -1.2785 and -0.7512)."""
    rng = np.random.default_rng(37)
    x = np.concatenate([rng.uniform(-100, 100, 1536), rng.uniform(-3, 3, 1536),
                        -1.2784645 + rng.uniform(-1e-4, 1e-4, 512),
                        -0.7511542 + rng.uniform(-1e-4, 1e-4, 512)]).astype(np.float32)
    x = x.reshape(128, 32)
    silu_dx, gelu_s, gelu_s_dx = k["v2_derivative_activations"](x)
    v = x.astype(np.float64)
    sig = lambda z: 1.0 / (1.0 + np.exp(-z))  # noqa: E731
    for got, want in ((silu_dx, sig(v) * (1 + v * (1 - sig(v)))),
                      (gelu_s, v * sig(1.702 * v)),
                      (gelu_s_dx, sig(1.702 * v) * (1 + 1.702 * v * (1 - sig(1.702 * v))))):
        normal = np.abs(want) >= 2.0**-126
        rel = np.abs(got[normal] - want[normal]) / np.abs(want[normal])
        assert rel.max() <= 2.0**-13


def test_gelu_dx_erf_dx_and_tan(k):
    """nl.gelu_dx and nl.erf_dx on the Scalar Engine against scipy in float64, within the
    engine's 2^-13 relative error, down their Gaussian tails and next to gelu_dx's zero (about
    -0.7518); nl.tan (sine, cosine, reciprocal, product) within three of those, next to its
    poles and zeros too."""
    from scipy import special

    rng = np.random.default_rng(41)
    x = np.concatenate([rng.uniform(-14, 9, 1536), rng.uniform(-3, 3, 1024),
                        -0.7517915 + rng.uniform(-1e-4, 1e-4, 512),
                        np.pi / 2 * rng.integers(-40, 40, 512) + rng.uniform(-1e-3, 1e-3, 512),
                        rng.uniform(-1e4, 1e4, 512)]).astype(np.float32).reshape(128, 32)
    gelu_dx, erf_dx, tan = k["v2_gaussian_derivatives_and_tangent"](x)
    v = x.astype(np.float64)
    for got, want, bound in (
            (gelu_dx, special.ndtr(v) + v * np.exp(-v * v / 2) / np.sqrt(2 * np.pi), 2.0**-13),
            (erf_dx, 2 / np.sqrt(np.pi) * np.exp(-v * v), 2.0**-13),
            (tan, np.tan(v), 3 * 2.0**-13)):
        normal = np.abs(want) >= 2.0**-126
        assert normal.sum() > 2500
        rel = np.abs(got[normal] - want[normal]) / np.abs(want[normal])
        assert rel.max() <= bound


def test_activate2_on_neuroncore_v4(k, seed):
    """nisa.activate2 on trn3 against numpy: a multiply-add stage (the Activation's own scale
    and bias), a reversed subtraction, a tile's add with the row sums; trn2 has no
    activate2."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 1)).astype(np.float32)
    e, th, plus, sums = k["v2_activated_after_a_stage"](x, b, platform_target="trn3")
    v, c = x.astype(np.float64), b.astype(np.float64)
    for got, want in ((e, np.exp(v * 0.5 + c)), (th, np.tanh(2.0 - v))):
        assert np.max(np.abs(got - want) / np.abs(want)) <= 2.0**-13
    assert np.array_equal(plus, x + b)
    assert np.allclose(sums[:, 0], (x + b).sum(axis=1, dtype=np.float64), rtol=1e-5,
                       atol=1e-5)
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: 'activate2' is "
                                            r"NeuronCore-v4's"):
        k["v2_activated_after_a_stage"](x, b, platform_target="trn2")


def test_exponential_on_the_vector_engine_of_neuroncore_v4(k, seed):
    """nisa.exponential on trn3 against numpy float64: exp(x - m) for a tile and a number,
    into fp32 and bf16, its running sums from zero, onto the last and from reduce_init; the
    exponentials on the vector engine's stream (the scalar engine's stays empty); trn2's
    vector engine has no exp."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, 64)).astype(np.float32) * 4
    m = x.max(axis=1, keepdims=True)
    e1, e2, e3, s1, s2, s3 = k["v2_exponentials"](x, m, platform_target="trn3")
    v = x.astype(np.float64)
    want1, want2, want3 = np.exp(v - m), np.exp(v - 2.0), np.exp(v)
    for got, want in ((e1, want1), (e2, want2)):  # the bound, and fp32's x - m
        assert np.max(np.abs(got - want) / want) <= 2.0**-13 + 1e-5
    assert np.max(np.abs(e3.astype(np.float64) - want3) / want3) <= 2.0**-8  # bf16's half ulp
    # the running sums of the fp32 results (fp32 accumulation of 64 and 128 terms); of the
    # bf16 output's fp32 results within the function's bound
    first, second = e1.astype(np.float64).sum(1), e2.astype(np.float64).sum(1)
    for got, want, rtol in ((s1, first, 1e-5), (s2, first + second, 1e-5),
                            (s3, 5.0 + want3.sum(1), 2.0**-13 + 1e-5)):
        assert np.allclose(got[:, 0], want, rtol=rtol, atol=0), (got[:3, 0], want[:3])
    streams = k["v2_exponentials"].trace(x, m, platform_target="trn3")[0].program().streams
    assert [type(i).__name__ for i in streams["vector"]].count("Activation") == 3
    assert not [i for i in streams.get("scalar", []) if type(i).__name__ == "Activation"]
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: 'exponential' needs the "
                                            r"vector engine's exp, which trn2's has not"):
        k["v2_exponentials"](x, m, platform_target="trn2")


def test_activate2_prelu(k, seed):
    """nisa.activate2 with nl.prelu against numpy's fp32: z where above zero, else the
    slope times z (a number, one a partition), bit for bit, with the row sums; a
    relu_param beside another function is refused."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((128, 64)) * 3).astype(np.float32)
    b = rng.standard_normal((128, 1)).astype(np.float32)
    slope = rng.uniform(-0.5, 1.5, (128, 1)).astype(np.float32)
    first, sums, second = k["v2_prelus"](x, b, slope, platform_target="trn3")
    z = x * np.float32(0.5) + b
    want = np.where(z > 0, z, np.float32(0.1) * z)
    assert np.array_equal(first, want)
    assert np.allclose(sums[:, 0], want.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-4)
    want2 = np.where(x > 0, x, slope * x).astype(ml_dtypes.bfloat16)
    assert np.array_equal(second.view(np.uint16), want2.view(np.uint16))
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: 'activate2': relu_param is "
                                            r"nl.prelu's slope, not a parameter of exp"):
        k["v2_activated_after_a_stage"](x, b, relu=0.5, platform_target="trn3")


def test_nc_matmul_mx_multiplies_mx_tiles_with_their_scales(k):
    """nisa.nc_matmul_mx on trn3 against numpy: matrices quantized to MXFP8 and MXFP4 on the
    host (OCP MX: a shared E8M0 exponent a block of 32), their float64 dequantized product
    within fp32 accumulation; the scales E8M0 arrays (ml_dtypes.float8_e8m0fnu). Refused:
    MX tiles without scales, on trn2 (no MX formats) at the kernel's line."""
    from kernels import mx
    from kernels.nki.tracer import numpy_dtype

    rng = np.random.default_rng(17)
    for fmt, (kk, m, n) in (("mxfp8", (128, 64, 48)), ("mxfp8_e5m2", (128, 64, 48)),
                            ("mxfp4", (256, 32, 40))):
        xs, xm = rng.standard_normal((kk, m)), rng.standard_normal((kk, n)) * 3
        (cs, ss), (cm, sm) = mx.quantize(xs, fmt), mx.quantize(xm, fmt)
        quad = numpy_dtype(mx.quad_type(fmt))
        args = (mx.pack(cs, fmt).view(quad), ss.view(ml_dtypes.float8_e8m0fnu),
                mx.pack(cm, fmt).view(quad), sm.view(ml_dtypes.float8_e8m0fnu))
        out = k["v2_mx_product"](*args, platform_target="trn3")
        want = mx.dequantize(cs, ss, fmt).T @ mx.dequantize(cm, sm, fmt)
        assert _err(out, want) <= 1e-6, fmt
        if fmt == "mxfp8":
            with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: 'nc_matmul' multiplies "
                                                    r"MX tiles .* with their scales"):
                k["v2_mx_product"](*args, plain=True, platform_target="trn3")
            with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: .*the tensor engine "
                                                    r"of trn2 takes .*, not mxfp8"):
                k["v2_mx_product"](*args, platform_target="trn2")


def _mx_args(rng, fmt, kk, m, n):
    from kernels import mx
    from kernels.nki.tracer import numpy_dtype

    xs, xm = rng.standard_normal((kk, m)), rng.standard_normal((kk, n)) * 3
    (cs, ss), (cm, sm) = mx.quantize(xs, fmt), mx.quantize(xm, fmt)
    quad = numpy_dtype(mx.quad_type(fmt))
    args = (mx.pack(cs, fmt).view(quad), ss.view(ml_dtypes.float8_e8m0fnu),
            mx.pack(cm, fmt).view(quad), sm.view(ml_dtypes.float8_e8m0fnu))
    return args, mx.dequantize(cs, ss, fmt).T @ mx.dequantize(cm, sm, fmt)


def test_a_matmul_writes_bf16_psum_from_neuroncore_v4(k):
    """NKI: "Starting NeuronCore-v4, dst can either be a float32 or bfloat16 tile". On trn3
    each fp32 sum of an MX matmul into a bf16 PSUM tile is rounded to nearest even into bf16
    (ml_dtypes' cast of the fp32 run's result, bit for bit); a second multiply accumulating
    adds its fp32 sum to the tile's value widened, in fp32, and rounds again. Refused on trn2
    (NeuronCore-v3) at the kernel's line."""
    from kernels.nki import language as nl

    args, want = _mx_args(np.random.default_rng(23), "mxfp8_e5m2", 128, 64, 48)
    f32 = k["v2_mx_product"](*args, platform_target="trn3")
    assert _err(f32, want) <= 1e-6
    b = k["v2_mx_product"](*args, dtype=nl.bfloat16, platform_target="trn3")
    assert b.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(b.view(np.uint16),
                                  f32.astype(ml_dtypes.bfloat16).view(np.uint16))
    twice = k["v2_mx_product"](*args, dtype=nl.bfloat16, twice=True, platform_target="trn3")
    np.testing.assert_array_equal(
        twice.view(np.uint16),
        (b.astype(np.float32) + f32).astype(ml_dtypes.bfloat16).view(np.uint16))
    assert _err(twice, 2 * want) <= 2.0**-8
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: 'nc_matmul_mx' writes fp32 to "
                                            r"PSUM on trn2, not bf16"):
        k["v2_mx_product"](*args, dtype=nl.bfloat16, platform_target="trn2")


def test_a_neuroncore_v4_matmul_streams_a_moving_tile_wider_than_a_bank_of_fp32(k):
    """NKI: from NeuronCore-v4 the moving tile may be as wide as 8 PSUM banks of dst's type:
    on trn3 a [64, 1024] moving tile into a bf16 PSUM tile (one bank) is x^T w rounded to
    bf16 (the array's multiplies of 512 columns each); trn2 refuses it at the kernel's
    line."""
    rng = np.random.default_rng(53)
    x = rng.standard_normal((64, 32)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((64, 1024)).astype(ml_dtypes.bfloat16)
    out = k["v2_wide_product"](x, w, platform_target="trn3")
    want = (x.astype(np.float64).T @ w.astype(np.float64))
    assert _err(out, want) <= 2.0**-8
    assert knki.SESSION.launches[-1].result.instructions["tensor"] >= 3  # a load, 2 multiplies
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: size of dimension 1 in "
                                            r"'moving\[64, 1024\]' of 'nc_matmul' exceed "
                                            r"architecture limitation of 512"):
        k["v2_wide_product"](x, w, platform_target="trn2")


def test_quantize_mx_on_the_vector_engine(k):
    """nisa.quantize_mx on trn3 against numpy, bit for bit: each group of 8 partitions by 4
    elements scaled by 2^(floor(log2(amax)) - 7) (NKI's: twice OCP's, 8 fp8_e4m3fn's largest
    exponent), 2^-127 for a group of zeros, the values rounded to nearest even into
    fp8_e4m3fn (ml_dtypes), four to a quad; each group's scale in the first four partitions
    of its quadrant; into fp8_e5m2 by 2^(floor(log2(amax)) - 14), its scales from a
    partition within the quadrant. Refused on trn2, at the kernel's line."""
    rng = np.random.default_rng(18)
    x = (rng.standard_normal((64, 32)) * np.exp2(rng.integers(-20, 20, (64, 1)))).astype(
        ml_dtypes.bfloat16)
    x[8:16, 4:8] = 0  # a group of zeros
    quads, scales = k["v2_quantized_on_device"](x, platform_target="trn3")
    v = x.astype(np.float64).reshape(8, 8, 8, 4)  # [group, partition, quad, element]
    amax = np.abs(v).max(axis=(1, 3))
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - 7, -127)
    codes = (v / np.exp2(e)[:, None, :, None]).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    want = (codes.astype(np.uint32) << (8 * np.arange(4, dtype=np.uint32))).sum(axis=-1)
    np.testing.assert_array_equal(quads.view(np.uint32), want.reshape(64, 8))
    want_scales = np.zeros((64, 8), np.uint8)
    for g in range(8):
        want_scales[32 * (g // 4) + g % 4] = (e[g] + 127).astype(np.uint8)
    np.testing.assert_array_equal(scales, want_scales)
    assert want_scales[1, 1] == 0  # the zeros' group: 2^-127
    # into float8_e5m2_x4 (the largest exponent 15), the scales from partition 4 of their
    # tile, as NKI packs a second tensor's beside the first's
    from kernels.nki import language as nl

    quads, scales = k["v2_quantized_on_device"](x, dtype=nl.float8_e5m2_x4, at=4,
                                                platform_target="trn3")
    e5 = np.where(amax > 0, e - 7, -127)
    codes = (v / np.exp2(e5)[:, None, :, None]).astype(ml_dtypes.float8_e5m2).view(np.uint8)
    want = (codes.astype(np.uint32) << (8 * np.arange(4, dtype=np.uint32))).sum(axis=-1)
    np.testing.assert_array_equal(quads.view(np.uint32), want.reshape(64, 8))
    want_scales = np.zeros((64, 8), np.uint8)
    for g in range(8):
        want_scales[4 + 32 * (g // 4) + g % 4] = (e5[g] + 127).astype(np.uint8)
    np.testing.assert_array_equal(scales, want_scales)
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: .*has no MX quantization"):
        k["v2_quantized_on_device"](x, platform_target="trn2")


def test_alu_operators_beyond_arithmetic(k, seed):
    """nl.logical_and/or/xor as tensor_tensor's op (nki-library's MoE backward pass clamps
    with them) against numpy's, on zeros of both signs, NaN and subnormals; nl.left_shift
    and nl.right_shift of int32 words by tile counts up to 40 and by the number 3, as
    numpy's shifts of the uint32 words (NKI's shift right is logical: zeros come in)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-1, 2, (128, 64)).astype(np.float32)
    y = rng.integers(-1, 2, (128, 64)).astype(np.float32)
    x[0, :4] = [-0.0, np.nan, 1e-45, np.inf]
    y[0, :4] = [1.0, 1.0, 1.0, 0.0]
    ints = rng.integers(-2**31, 2**31, (128, 64), dtype=np.int64).astype(np.int32)
    counts = rng.integers(0, 41, (128, 64)).astype(np.uint32)
    outs = k["v2_alu_ops"](x, y, ints, counts)
    for out, fn in zip(outs[:3], (np.logical_and, np.logical_or, np.logical_xor), strict=True):
        assert np.array_equal(out, fn(x, y).astype(np.float32))
    words = ints.view(np.uint32)
    wants = (np.left_shift(words, counts), np.right_shift(words, counts),
             np.left_shift(words, np.uint32(3)), np.right_shift(words, np.uint32(3)))
    for out, want in zip(outs[3:], wants, strict=True):
        assert out.dtype == np.int32 and np.array_equal(out.view(np.uint32), want)


def test_abs_max_and_abs_min_from_neuroncore_v4(k, seed):
    """nl.abs_max / nl.abs_min on trn3 against numpy: the operand of larger (smaller)
    magnitude with its sign, a tie giving y (NKI's examples); trn2's engines have neither."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, 64)).astype(np.float32)
    y = rng.standard_normal((128, 64)).astype(np.float32)
    x[0, :4], y[0, :4] = [-5.0, 1.0, 5.0, -0.0], [3.0, -1.0, -3.0, 0.0]
    big, small = k["v2_by_magnitude"](x, y, platform_target="trn3")
    assert np.array_equal(big, np.where(np.abs(x) > np.abs(y), x, y))
    assert np.array_equal(small, np.where(np.abs(x) < np.abs(y), x, y))
    assert big[0, :2].tolist() == [-5.0, -1.0] and small[0, 2] == -3.0
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: .*no abs_max, "
                                            r"NeuronCore-v4 on has"):
        k["v2_by_magnitude"](x, y, platform_target="trn2")


@pytest.mark.parametrize("dtype", ["mxfp4_x4", "mxfp8_x4", "mxfp8_e5m2_x4"])
def test_memset_of_mx_quads_takes_zero_only(k, dtype, seed):
    """nisa.memset of an x4 tile with 0 zeroes its bytes (nki-library's MXFP4 down projection
    pads its weights so); any other value is refused at the call, as NKI documents."""
    from kernels.nki.tracer import MX_NUMPY
    dt = MX_NUMPY[dtype]
    words = np.random.default_rng(seed).integers(1, 2**16, (32, 8)).astype(dt[0])
    q = words.view(dt)
    out = k["v2_mx_zero_padded"](q, 20, platform_target="trn3")
    got = np.asarray(out).view(dt[0])
    assert np.array_equal(got[:20], words[:20]) and not got[20:].any()
    with pytest.raises(knki.NkiError, match=r"isa_more_v2.py:\d+: 'memset' of a .* tile "
                                            r"takes value 0 only"):
        k["v2_mx_zero_padded"](q, 20, value=1.0, platform_target="trn3")


def test_tensor_scalar_without_a_first_operation(k, seed):
    """op0 None leaves the first stage out: the second alone, or a copy."""
    import nki.language as nl

    x = np.random.default_rng(seed).standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(k["v2_no_first_operation"](x), x)
    np.testing.assert_array_equal(k["v2_no_first_operation"](x, nl.maximum, -0.5),
                                  np.maximum(x, np.float32(-0.5)))


@pytest.mark.parametrize("op,axis", [("multiply", 1), ("logical_and", 1), ("logical_or", 1),
                                     ("logical_xor", 1), ("bitwise_and", 1), ("bitwise_or", 1),
                                     ("bitwise_xor", 1), ("bitwise_xor", (1, 2)),
                                     ("multiply", 2)])
def test_tensor_reduce_with_every_operator_nki_allows(k, op, axis, seed):
    """NKI's legal reductions beyond add, max and min (its table of ALU operators): a product
    (along the row in order, each step rounded to fp32, as numpy's accumulated float32
    product), the logical operators (1 or 0 of the truths, a NaN true) and the bitwise ones
    on int32 words, every bit kept; along the free axis of [P, F], both of [P, A, B], and
    one of them."""
    import nki.language as nl

    rng = np.random.default_rng(seed)
    shape = (128, 64) if axis == 1 else (128, 4, 16)
    x = rng.uniform(0.5, 1.5, shape).astype(np.float32)
    x[rng.random(shape) < 0.3] = 0.0
    x.reshape(128, -1)[0, :2] = [np.nan, -0.0]
    words = rng.integers(-2**31, 2**31, shape, dtype=np.int64).astype(np.int32)
    src = words if op.startswith("bitwise") else x
    flat = src if axis == 2 else src.reshape(128, -1)
    got = k["v2_reductions_beyond_sums"](x, words, getattr(nl, op), axis=axis)
    if op == "multiply":
        want = np.multiply.accumulate(flat, axis=-1, dtype=np.float32)[..., -1]
    elif op.startswith("logical"):
        want = getattr(np, op).reduce(flat != 0, axis=-1).astype(np.float32)
    else:
        want = getattr(np, op).reduce(flat, axis=-1)
    np.testing.assert_array_equal(got.reshape(want.shape), want)


def test_a_negated_product_and_no_negated_bitwise_reduction(k):
    import nki.language as nl

    x = np.random.default_rng(3).uniform(0.5, 1.5, (128, 32)).astype(np.float32)
    got = k["v2_reductions_beyond_sums"](x, x.view(np.int32), nl.multiply, negate=True)
    want = -np.multiply.accumulate(x, axis=1, dtype=np.float32)[:, -1]
    np.testing.assert_array_equal(got.reshape(-1), want)
    with pytest.raises(knki.NkiError, match=r"negate of a bitwise_or reduction"):
        k["v2_reductions_beyond_sums"](x, x.view(np.int32), nl.bitwise_or, negate=True)


def test_nl_prod_is_numpys_product_in_order(k, seed):
    x = np.random.default_rng(seed).uniform(0.5, 1.5, (128, 8, 12)).astype(np.float32)
    for axis in (2, (1, 2)):
        flat = x if axis == 2 else x.reshape(128, -1)
        want = np.multiply.accumulate(flat, axis=-1, dtype=np.float32)[..., -1]
        got = k["v2_product_along"](x, axis)
        np.testing.assert_array_equal(got.reshape(want.shape), want)
