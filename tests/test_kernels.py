"""Kernels on the core simulator: numpy float64 within the stated tolerances, the trn1 GEMM
anchor, and the overlap the fused kernel is written for."""

import json

import numpy as np
import pytest

import kernels
from hdl.params import core_params
from specs.loader import load

#: [MMT]: the blocked, DMA-overlapped NKI tutorial kernel, bf16 [4096, 8192] x [8192, 8192]
#: on one NeuronCore-v2 of trn1 (neuroncore.md).
PUBLISHED_BLOCKED_S = 6.97e-3


def _cases():
    small = {("M", "K", "N"): [dict(M=1, K=1, N=1), dict(M=128, K=256, N=512),
                               dict(M=130, K=300, N=520)],
             ("R", "C"): [dict(R=1, C=64), dict(R=128, C=128), dict(R=200, C=300)],
             # attention: whole heads in groups (20 heads of 200 keys: two groups, a
             # partial query and value tile each; 300 one-key heads of 128: groups sized by
             # their values and outputs) and key blocks streamed (600 keys)
             ("B", "S", "D"): [dict(B=1, S=1, D=1), dict(B=2, S=128, D=64),
                                 dict(B=1, S=600, D=32), dict(B=20, S=200, D=16),
                                 dict(B=300, S=1, D=128)],
             # token-major attention: one token; two sequences of BERT-base's heads (turned
             # two at a time); a partial query and value tile; two head groups a sequence
             # (16 + 4 of 256 B a row); four tiles of a whole key block; heads of 32
             # turned four at a time, the last three
             ("H", "B", "S", "D"): [dict(H=1, B=1, S=1, D=1), dict(H=12, B=2, S=128, D=64),
                                    dict(H=5, B=3, S=200, D=16), dict(H=20, B=2, S=40, D=128),
                                    dict(H=2, B=1, S=512, D=32), dict(H=7, B=1, S=100, D=32)],
             # two token tiles, the second partial, and two head groups (5,120 > 4,096)
             ("T", "H", "D"): [dict(T=1, H=1, D=2), dict(T=5, H=3, D=8),
                               dict(T=130, H=40, D=128)],
             # more sequences than DMA queues; a batch of one at the cache's last position
             ("B", "KVH", "D", "S"): [dict(B=1, KVH=1, D=1, S=1), dict(B=1, KVH=2, D=8, S=5),
                                      dict(B=20, KVH=3, D=16, S=40)],
             # groups of 4 query heads, two chunks of the cache (2,048 + 452), a last block
             # of 68 positions; 1,280 query rows, transposed in two PSUM banks' batches
             ("B", "H", "KVH", "S", "D"): [dict(B=1, H=1, KVH=1, S=1, D=1),
                                           dict(B=5, H=3, KVH=3, S=3, D=4),
                                           dict(B=2, H=8, KVH=2, S=2500, D=64),
                                           dict(B=40, H=32, KVH=8, S=300, D=64)],
             # (K = V = 2: an index 1, for the relative error) two row tiles and three
             # vocabulary tiles, the last partial
             ("B", "V", "K"): [dict(B=1, V=2, K=2), dict(B=3, V=50, K=5),
                               dict(B=130, V=9000, K=3)]}
    for k in kernels.KERNELS.values():
        for dtype in k.dtypes:
            if dtype in kernels.MX_FORMATS:
                continue  # trn1's array has no MX formats: test_mx_gemm_on_trn3
            shapes = small[k.dims]
            if k.dims == ("R", "C") and "norm" not in k.name:
                # one column: a norm's variance would be 0 or tiny, below the scalar engine's
                # rsqrt range (2^-16 and up, hdl/vector/functions.py)
                shapes = shapes + [dict(R=130, C=1)]
            if k.name in ("rmsnorm", "layernorm"):
                # a few rows spread over partitions: 3 rows of 12 pieces; 2 rows of 64,
                # more partitions than a piece has columns
                shapes = shapes + [dict(R=3, C=768), dict(R=2, C=4096)]
            if k.name == "attention_causal":
                shapes = shapes + [dict(B=2, S=1100, D=16)]  # 3 key blocks, 4 diagonal offsets
            if k.name in ("adam", "residual_add", "grad_accumulate"):
                shapes = shapes + [dict(R=130, C=2100)]  # two column passes, one partial
            if dtype not in ("bf16", "fp32"):
                shapes = shapes[2:]
            for shape in shapes:
                yield pytest.param(k.name, dtype, shape,
                                   id=f"{k.name}-{dtype}-" + "x".join(map(str, shape.values())))


@pytest.mark.parametrize("name, dtype, shape", list(_cases()))
def test_kernel_matches_numpy(trn1, name, dtype, shape, seed):
    k = kernels.KERNELS[name]
    run = kernels.run(trn1, k, shape, dtype, seed=seed)
    ref = run.reference()
    tol = kernels.tolerance(k, dtype)
    assert set(run.outputs) == set(ref)
    for out, want in ref.items():
        err = np.abs(run.outputs[out] - want).max() / np.abs(want).max()
        assert err <= tol, f"{out}: {err:.3g} > {tol:g}"



@pytest.mark.parametrize("m", [40, 130])
def test_fused_gemm_over_several_m_blocks(m, seed):
    """With M over several M-blocks (trn2's simulation-scale core: blocks of 4 x 8 rows),
    every row tile's bias loaded once and rhs once for all blocks: the simulator's race check
    passes and the result matches numpy."""
    k = kernels.KERNELS["gemm_bias_gelu"]
    run = kernels.run(core_params(load("trn2"), "sim"), k, dict(M=m, K=40, N=64), "bf16",
                      seed=seed)
    want = run.reference()["out"]
    assert np.abs(run.outputs["out"] - want).max() / np.abs(want).max() \
        <= kernels.tolerance(k, "bf16")


@pytest.mark.parametrize("name, dtype, shape", [
    # lhs rows turned on chip a PSUM bank of 64 bytes at a time (4 bf16 transposes of 8
    # columns), over three M-blocks and ten K-blocks of up to 8 tiles (sums in the accumulator)
    ("gemm_rows", "bf16", dict(M=70, K=600, N=40)),
    # the same with a bias per column added in the accumulator before the gelu (eleven)
    ("gemm_rows_bias_gelu", "bf16", dict(M=70, K=600, N=40)),
    # rows on all 16 partitions, the array 8 deep: the weight gradients' partition sum folds
    # partitions 8-15 onto 0-7 first; three row tiles, the last partial
    *((n, d, dict(R=37, C=24)) for n in ("rmsnorm_backward", "layernorm_backward")
      for d in ("fp32", "bf16")),
    # key blocks of one 64-byte PSUM bank of fp32 (16 keys): three, the last partial
    ("attention", "bf16", dict(B=2, S=40, D=8)),
    ("attention_causal", "fp32", dict(B=1, S=40, D=8)),
    # a row spread over 4 partitions of 128 columns (the 8 x 8 array sums and hands back)
    ("layernorm", "bf16", dict(R=1, C=512)),
    ("rmsnorm", "fp32", dict(R=2, C=512)),
    # token-major: two query tiles of 8 over one key block of 16, a partial one of 5
    ("attention_rows", "bf16", dict(H=3, B=2, S=16, D=8)),
    ("attention_rows_causal", "fp32", dict(H=5, B=1, S=13, D=8)),
    # 7 DMA queues: the outputs go on dma0 after the queries
    ("decode_attention", "bf16", dict(B=2, H=4, KVH=2, S=40, D=8)),
])
def test_kernel_at_simulation_scale(name, dtype, shape, seed):
    """Kernels whose tiling follows a limit that differs at trn2's simulation scale (16
    partitions, an 8 x 8 array, PSUM banks of 64 bytes, 7 DMA queues) pass the simulator's
    rules there and match numpy."""
    params = core_params(load("trn2"), "sim")
    k = kernels.KERNELS[name]
    run = kernels.run(params, k, shape, dtype, seed=seed)
    ref = run.reference()
    assert set(run.outputs) == set(ref)
    for out, want in ref.items():
        err = np.abs(run.outputs[out] - want).max() / np.abs(want).max()
        assert err <= kernels.tolerance(k, dtype), f"{out}: {err:.3g}"


@pytest.mark.parametrize("chip, dtype, shape", [
    ("trn1", "bf16", dict(M=1100, K=300, N=130)),  # 3 blocks, the last of 76 rows
    ("trn2", "fp8_e4m3", dict(M=600, K=520, N=40)),  # double rows: K-tiles of 256, 256, 8
])
def test_gemm_loads_rhs_once_over_m_blocks(chip, dtype, shape, seed):
    """A GEMM of several M-blocks whose rhs fits in SBUF beside them keeps it there: each
    operand crosses the DMA once (lhsT, rhs, out), and the result matches numpy."""
    k = kernels.KERNELS["gemm"]
    run = kernels.run(core_params(load(chip)), k, shape, dtype, seed=seed)
    want = run.reference()["out"]
    assert np.abs(run.outputs["out"] - want).max() / np.abs(want).max() \
        <= kernels.tolerance(k, dtype)
    m, kk, n = shape["M"], shape["K"], shape["N"]
    es = 1 if dtype.startswith("fp8") else 2
    assert run.result.dma_bytes == (m * kk + kk * n) * es + m * n * 2


@pytest.mark.parametrize("dtype, shape", [
    ("mxfp8", dict(M=130, K=1056, N=520)),  # tiles of 128, 128 and 8 quad partitions
    ("mxfp4", dict(M=32, K=32, N=8)),       # one scale group
])
def test_mx_gemm_on_trn3(dtype, shape, seed):
    """The blocked GEMM in an MX format on trn3 against numpy float64 on the inputs' values
    as ml_dtypes reads them (elements times float8_e8m0fnu scales): only the fp32 sums and
    the bf16 output round. With K above one MX pass (4 x 128), the tensor engine's 3 passes
    take a third of bf16's 9 in cycles."""
    params = core_params(load("trn3"))
    k = kernels.KERNELS["gemm"]
    run = kernels.run(params, k, shape, dtype, seed=seed)
    want = run.reference()["out"]
    err = np.abs(run.outputs["out"] - want).max() / np.abs(want).max()
    assert err <= kernels.tolerance(k, dtype)
    assert run.result.flops == 2.0 * shape["M"] * shape["K"] * shape["N"]
    if shape["K"] > 4 * params.rows:
        bf16 = kernels.run(params, k, shape, "bf16", timing_only=True).result
        assert run.result.cycles["tensor"] < bf16.cycles["tensor"] / 2.5


def test_mx_quantization_follows_ocp():
    """OCP MX v1.0 section 6.3 by another route: each block's scale is 2^(e - emax) for
    2^e <= amax < 2^(e+1) (np.frexp), the elements are ml_dtypes' round-to-nearest of the
    scaled values clamped to the largest finite element, an all-zero block scale 2^-127."""
    import ml_dtypes

    from kernels import mx

    rng = np.random.default_rng(5)
    x = rng.standard_normal((96, 7)) * 2.0 ** rng.integers(-20, 20, (1, 7))
    x[32:64, 3] = 0.0
    for fmt, emax, top in (("mxfp8", 8, 448.0), ("mxfp4", 2, 6.0)):
        codes, scales = mx.quantize(x, fmt)
        amax = np.abs(x.reshape(3, 32, 7)).max(axis=1)
        e = np.frexp(amax)[1] - 1 - emax
        want_scales = np.where(amax > 0, e + 127, 0)
        assert np.array_equal(scales, want_scales)
        scaled = np.clip(x / np.ldexp(1.0, np.repeat(want_scales, 32, axis=0) - 127), -top, top)
        element = mx.ELEMENTS[fmt]
        assert np.array_equal(codes.view(element).astype(np.float64),
                              scaled.astype(element).astype(np.float64))
        assert np.array_equal(mx.dequantize(codes, scales, fmt),
                              scaled.astype(element).astype(np.float64)
                              * np.ldexp(1.0, np.repeat(want_scales, 32, axis=0) - 127))
    assert ml_dtypes.float8_e8m0fnu(2.0 ** -127).view(np.uint8) == 0


def test_mx_gemm_refuses_what_it_cannot_tile():
    params = core_params(load("trn3"))
    with pytest.raises(kernels.KernelError, match=r"an mxfp8 GEMM needs K a multiple of 32 "
                                                  r"and K-tiles of a multiple of 8 partitions, "
                                                  r"not K=48 and 128"):
        kernels.run(params, kernels.KERNELS["gemm"], dict(M=8, K=48, N=8), "mxfp8")
    with pytest.raises(kernels.KernelError, match=r"dtype must be one of .* on trn1, not "
                                                  r"'mxfp8'"):
        kernels.run(core_params(load("trn1")), kernels.KERNELS["gemm"], dict(M=8, K=32, N=8),
                    "mxfp8")


def test_timing_only_gives_the_numeric_runs_time(trn1):
    k = kernels.KERNELS["gemm_bias_gelu"]
    shape = dict(M=200, K=300, N=700)
    numeric = kernels.run(trn1, k, shape, "bf16").result
    timing = kernels.run(trn1, k, shape, "bf16", timing_only=True).result
    assert timing.time == numeric.time
    assert timing.busy == numeric.busy


def test_trn1_gemm_anchor_and_naive(trn1):
    shape = dict(M=4096, K=8192, N=8192)
    blocked = kernels.run(trn1, kernels.KERNELS["gemm"], shape, "bf16", timing_only=True)
    assert blocked.result.time == pytest.approx(PUBLISHED_BLOCKED_S, rel=0.15)
    naive = kernels.run(trn1, kernels.KERNELS["gemm_naive"], shape, "bf16", timing_only=True)
    # the tutorial's unoptimised kernels took 51.8 ms and 42.96 ms: much slower
    assert naive.result.time > 5 * blocked.result.time
    assert naive.result.flops == 2.0 * 4096 * 8192 * 8192
    # the blocked kernel adds each K-block's sums into its fp32 accumulator: a few more
    assert 0 <= blocked.result.flops / naive.result.flops - 1 < 0.01


def test_fused_gemm_overlaps_tensor_and_scalar(trn1):
    run = kernels.run(trn1, kernels.KERNELS["gemm_bias_gelu"], dict(M=512, K=512, N=2048),
                      "bf16", timing_only=True, trace=True)
    doc = json.loads(run.result.trace_json())
    tid = {e["args"]["name"]: e["tid"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    spans = {name: [(e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"]
                    if e["ph"] == "X" and e["tid"] == t] for name, t in tid.items()}
    acts = [s for s in spans["scalar"]]
    assert acts and all(e["name"] == "act" for e in doc["traceEvents"]
                        if e["ph"] == "X" and e["tid"] == tid["scalar"])
    overlapping = sum(any(a0 < t1 and t0 < a1 for t0, t1 in spans["tensor"])
                      for a0, a1 in acts)
    assert overlapping >= len(acts) // 2


@pytest.mark.parametrize("text, message", [
    ("M=1,K=2", "gemm needs shape keys M, K, N; missing N"),
    ("M=1,K=2,N=x", "--shape must be KEY=INT,... with keys M, K, N, found 'N=x'"),
    ("M=1,K=2,N=3,Q=4", "gemm takes shape keys M, K, N, found 'Q'"),
    ("M=1,M=2,K=2,N=3", "shape key M given twice"),
    ("M=0,K=2,N=3", "shape M must be at least 1, found 0"),
])
def test_bad_shapes(text, message):
    with pytest.raises(kernels.KernelError, match=message.replace("(", r"\(")
                       .replace(")", r"\)").replace(".", r"\.")):
        kernels.parse_shape(text, kernels.KERNELS["gemm"])


def test_token_major_attention_takes_one_key_block(trn1):
    """Past one key block (512 keys on trn1) the token-major kernel refuses, naming the
    head-major kernel that streams longer sequences."""
    with pytest.raises(kernels.KernelError, match=r"token-major attention takes at most 512 "
                                                  r"tokens a sequence .*, not 513"):
        kernels.run(trn1, kernels.KERNELS["attention_rows"], dict(H=2, B=1, S=513, D=8),
                    "bf16", timing_only=True)
