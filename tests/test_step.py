"""`gen step`: a training step lowered to core kernels, against the published trn1 result and
hand-worked figures."""

import math
import re

import numpy as np
import pytest
from click.testing import CliRunner

import kernels
from explore import model, step, step_cli, step_lowering, step_sweep, workloads
from explore.kerneltimes import KernelTimes
from generators.cli import main
from hdl.params import core_params
from kernels.attention import key_block, query_tile
from specs.loader import load

#: AWS Neuron SDK trn1 benchmark (neuroncore.md): Llama2-7B on 16 x trn1.32xlarge, TP 8,
#: DP 64, 1,024 sequences of 4,096 tokens per step: 81 sequences/s, 30.8 % MFU.
PUBLISHED_SEQ_S = 81.0
PUBLISHED_MFU = 0.308


@pytest.fixture(scope="module")
def times():
    return KernelTimes(core_params(load("trn1")))


@pytest.fixture(scope="module")
def llama(times):
    return step_cli.from_cli("trn1.32xlarge", "llama2-7b", tp=8, nodes=16, times=times)


def run(*args):
    return CliRunner().invoke(main, list(args))


#: More published trn1 training results (sources.yaml NEURON-TRN1-TRAIN): workload, options of
#: `gen step` as the table states the run (nodes, TP, PP, micro-batch, sequence length, global
#: batch), published sequences per second.
ANCHORS = {
    "llama3.1-8b": ("llama3.1-8b", dict(nodes=32, tp=32, pp=1, micro_batch=1, seq=8192,
                                        batch=1024), 47.95),
    "llama3.1-70b": ("llama3.1-70b", dict(nodes=32, tp=32, pp=8, micro_batch=1, seq=8192,
                                          batch=1024), 7.94),
    "bert-large-ph1-16-nodes": ("bert-large-ph1", dict(nodes=16, tp=1, pp=1, micro_batch=16,
                                                       batch=1048576), 56923.65),
    "bert-large-ph1-1-node": ("bert-large-ph1", dict(nodes=1, tp=1, pp=1, micro_batch=16,
                                                     batch=16384), 3836.47),
}
@pytest.mark.parametrize("name", list(ANCHORS))
def test_published_trn1_anchors(name, times):
    from specs.loader import sources

    assert "NEURON-TRN1-TRAIN" in sources()
    workload, options, published = ANCHORS[name]
    r = step_cli.from_cli("trn1.32xlarge", workload, times=times, **options).result
    assert r.fits
    assert r.sequences_per_second == pytest.approx(published, rel=0.25)


def test_llama2_7b_through_the_cli(tmp_path, llama):
    result = run("step", "trn1.32xlarge", "llama2-7b", "--tp", "8", "--nodes", "16",
                 "--plot", str(tmp_path / "b.png"))
    assert result.exit_code == 0, result.output
    assert "512 ranks (TP 8 x PP 1 x DP 64)" in result.output
    seq_s = float(re.search(r"sequences/s\s+([0-9.]+)", result.output).group(1))
    assert seq_s == pytest.approx(llama.result.sequences_per_second, rel=1e-3)
    assert (tmp_path / "b.png").stat().st_size > 0 and (tmp_path / "b.svg").is_file()


def test_published_llama2_7b_anchor(llama):
    r = llama.result
    assert r.sequences_per_second == pytest.approx(PUBLISHED_SEQ_S, rel=0.25)
    assert r.mfu == pytest.approx(PUBLISHED_MFU, rel=0.25)


def test_breakdown_adds_up_to_the_step(llama, times):
    r = llama.result
    assert set(r.parts) == set(step.PARTS)
    assert sum(r.parts.values()) == pytest.approx(r.step_time, rel=1e-12)
    # the GEMM part is the micro-batches x (layers x one layer's GEMM kernels + the head's),
    # summed here from the kernel times directly
    def gemm_seconds(calls):
        return sum(times(c.kernel, dict(c.shape), c.dtype) * c.count for c in calls
                   if c.part == "gemm")
    c = r.calls
    per_micro = 32 * (gemm_seconds(c["forward"]) + gemm_seconds(c["backward"])) \
        + gemm_seconds(c["first"]) + gemm_seconds(c["last"])
    assert r.micro_batches == 1024 / 64
    assert r.parts["gemm"] == pytest.approx(16 * per_micro, rel=1e-9)
    assert r.parts["bubble"] == 0.0


def test_gemm_only_brings_back_the_optimistic_figure(llama, times):
    only = step_cli.from_cli("trn1.32xlarge", "llama2-7b", tp=8, nodes=16, gemm_only=True,
                             times=times).result
    assert only.parts["other"] == only.parts["optimizer"] == 0.0
    base = model.base_from_spec("trn1.32xlarge")
    analytic = model.evaluate({"nodes": np.array([16.0])}, base,
                              workloads.load("llama2-7b", tensor=8))
    optimistic = float(analytic["tokens_per_second"][0])
    assert only.tokens_per_second == pytest.approx(optimistic, rel=0.25)
    # the kernels besides the GEMMs (attention, norms, activations, optimizer) and the
    # communication cost a third of the step or more
    assert llama.result.tokens_per_second < 2 / 3 * only.tokens_per_second


def test_lowered_gemms_do_the_layers_flops(llama):
    # hand-worked: forward + backward = 3 x 2 x tokens x weights of every linear layer
    h, L, ffn, vocab, kv = 4096, 32, 11008, 32000, 4096
    tokens = 1024 * 4096
    weights = L * (h * (h + 2 * kv) + h * h + 3 * h * ffn) + vocab * h
    r = llama.result
    lay = r.layout
    flops = 0.0
    for part, times_run in (("forward", L), ("backward", L), ("last", 1)):
        for c in r.calls[part]:
            if c.part == "gemm" and not c.what.startswith("attention"):
                s = dict(c.shape)
                flops += 2.0 * s["M"] * s["K"] * s["N"] * c.count * times_run
    flops *= lay.tp * lay.dp * r.micro_batches
    assert flops == pytest.approx(6.0 * tokens * weights, rel=1e-9)


def test_causal_fraction_by_hand():
    # 1024 queries in tiles of 128, keys in blocks of 512: tiles 0-3 need 1 block, 4-7 need 2
    assert step_lowering.causal_fraction(1024, 128, 512) == pytest.approx((4 * 1 + 4 * 2)
                                                                          / (8 * 2))
    assert step_lowering.causal_fraction(512, 128, 512) == 1.0
    # trn2's simulation scale: tiles of 8 queries, blocks of 16 keys; 24 queries: tiles 0-1
    # need 1 block, tile 2 needs 2 of the 2
    params = core_params(load("trn2"), "sim")
    assert (query_tile(params), key_block(params)) == (8, 16)
    assert step_lowering.causal_fraction(24, 8, 16) == pytest.approx((1 + 1 + 2) / (3 * 2))


def test_full_recomputation_reruns_the_forward_gemms(llama, times):
    full = step_cli.from_cli("trn1.32xlarge", "llama2-7b", tp=8, nodes=16, recompute="full",
                             times=times).result
    # the forward is a third of the layers' GEMM work: full recomputation adds about that
    ratio = full.parts["gemm"] / llama.result.parts["gemm"]
    assert 1.2 < ratio < 1.4
    assert full.memory["activations"] < 0.1 * llama.result.memory["activations"]


def test_pipeline_bubble_and_memory(times):
    pp = step_cli.from_cli("trn1.32xlarge", "llama2-7b", tp=8, pp=4, nodes=16, times=times).result
    assert pp.layout.dp == 16 and pp.micro_batches == 64
    per_micro = (pp.parts["gemm"] + pp.parts["other"]) / pp.micro_batches
    # 1F1B: (pp - 1) micro-batch slots idle, each at least one micro-batch's kernels
    assert pp.parts["bubble"] >= 3 * per_micro
    assert pp.parts["bubble"] < 3 * per_micro * 1.3
    big = step_cli.from_cli("trn1.32xlarge", "gpt3-175b", nodes=16, times=times).result
    assert big.fits and big.layout.tp * big.layout.pp == 256
    assert sum(big.memory.values()) <= big.hbm_per_rank
    with pytest.raises(step.StepError, match="divide the 512 ranks"):
        step_cli.from_cli("trn1.32xlarge", "gpt3-175b", tp=32, pp=12, nodes=16, times=times)


def test_gpt3_175b_without_pipeline_does_not_fit(times):
    # the per-layer kernels are those of the TP 32 x PP 8 split above (cached)
    r = step_cli.from_cli("trn1.32xlarge", "gpt3-175b", tp=32, pp=1, nodes=16,
                          recompute="full", times=times).result
    params = workloads.transformer_params(workloads.load_spec("gpt3-175b"))
    # hand-worked: bf16 weights, 2 x 175e9 / 32, and the fp32 accumulators of the gradients
    # over 1536 / 16 = 96 micro-batches, 4 x 175e9 / 32: 32.8 GB > 16 GiB
    assert r.micro_batches == 96
    assert r.memory["weights"] == pytest.approx(2 * params / 32)
    assert r.memory["gradients"] == pytest.approx(4 * params / 32)
    assert not r.fits


def test_kernel_times_cache_on_disk(tmp_path):
    params = core_params(load("trn1"))
    shape = {"R": 256, "C": 512}
    first = KernelTimes(params, tmp_path)
    t = first("swiglu", shape, "bf16")
    assert first.computed == 1
    again = KernelTimes(params, tmp_path)
    assert again("swiglu", shape, "bf16") == t and again.computed == 0
    direct = kernels.run(params, kernels.KERNELS["swiglu"], shape, "bf16", timing_only=True)
    assert t == direct.result.time
    assert math.isfinite(t) and t > 0


@pytest.mark.parametrize("args, message", [
    (("--tp", "3"), "expected TP x PP (3 x 1) to divide the 512 ranks"),
    (("--tp", "64"), "expected --tp to divide the 32 heads"),
    (("--tp", "8", "--dp", "3"), "expected TP x PP x DP to be the"),
    (("--micro-batch", "3"), "to divide the global batch"),
])
def test_bad_split_is_one_line_and_status_2(args, message):
    result = run("step", "trn1.32xlarge", "llama2-7b", "--nodes", "16", *args)
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_every_bundled_transformer_lowers(times):
    for name in workloads.bundled():
        spec = workloads.load_spec(name)
        if not isinstance(spec, workloads.Transformer):
            continue
        calls = step_lowering.lower(spec, step_lowering.Layout(tp=spec.parallel.tensor),
                                    times.params)
        kinds = {c.kernel for c in calls["forward"]}
        assert ("swiglu" in kinds) == spec.gated_ffn
        assert ("layernorm" in kinds) == (spec.norm == "layernorm")
        assert np.all([c.count > 0 for c in calls["forward"] + calls["backward"]])


def test_many_points_at_once_match_one_at_a_time(times):
    base, _, _ = step_cli.resolve("trn1.32xlarge")
    t = workloads.load_spec("llama2-7b")
    grid = [(8, 1, 1, "selective", 16), (8, 2, 1, "full", 16), (8, 4, 1, "none", 32),
            (8, 1, 1, "selective", 3), (8, 2, 1, "selective", 64)]
    tp, pp, mb, rc, nodes = (np.array(x) for x in zip(*grid, strict=True))
    many = step.evaluate_many(t, base, times, tp=tp, pp=pp, micro_batch=mb, nodes=nodes,
                              recompute=rc)
    for i, (a, b, c, r, n) in enumerate(grid):
        one = step.evaluate_many(t, base, times, tp=a, pp=b, micro_batch=c, nodes=n,
                                 recompute=r)
        for name in step.METRICS:
            np.testing.assert_allclose(many[name][i], one[name][0], rtol=1e-12,
                                       err_msg=f"{name} of point {i}")
    # 3 nodes: 96 ranks give DP 12, which does not divide the batch of 1024
    assert not many["valid"][3] and np.isnan(many["step_time"][3])


def test_faster_efa_only_shortens_communication(times):
    base, _, _ = step_cli.resolve("trn1.32xlarge")
    t = workloads.load_spec("llama2-7b")
    efa = base.efa_bandwidth * np.array([1.0, 4.0])
    out = step.evaluate_many(t, base, times, tp=8, pp=1, micro_batch=1, nodes=16,
                             recompute="selective", values={"efa_bandwidth": efa})
    assert out["communication_time"][1] < out["communication_time"][0]
    assert out["gemm_time"][1] == out["gemm_time"][0]
    with pytest.raises(step.StepError, match="system parameters"):
        step.evaluate_many(t, base, times, tp=8, pp=1, micro_batch=1, nodes=16,
                           recompute="none", values={"clock": 1e9})


def test_grid_through_the_cli(tmp_path, llama):
    import pandas as pd

    out = tmp_path / "t.parquet"
    result = run("step", "trn1-cluster", "llama2-7b", "--tp", "8", "--pp", "1,2", "--nodes",
                 "16,3", "--recompute", "selective,full", "-o", str(out), "--plot",
                 str(tmp_path / "g.png"))
    assert result.exit_code == 0, result.output
    assert "8 design points, 4 valid, 4 fit in HBM" in result.output
    table = pd.read_parquet(out)
    assert len(table) == 8 and set(step.METRICS) <= set(table.columns)
    one = table[(table.pp == 1) & (table.nodes == 16) & (table.recompute == "selective")]
    # a grid point is the single evaluation of the same split
    assert one.sequences_per_second.iloc[0] == pytest.approx(
        llama.result.sequences_per_second, rel=1e-9)
    assert (tmp_path / "g.png").is_file()
    bad = run("step", "trn1-cluster", "llama2-7b", "--tp", "8,16", "--dp", "4")
    assert bad.exit_code == 2 and "expected --nodes (not --dp) in a grid" in bad.output


def test_lowered_step_as_sweep_metrics(llama):
    from explore import run

    base, params, _ = step_cli.resolve("trn1.32xlarge")
    work = workloads.load("llama2-7b", tensor=8)
    nodes = np.array([16.0, 32.0, 3.0])
    metrics = list(step_sweep.SWEEP_METRICS)
    table = run.evaluate_chunk({"nodes": nodes}, base, work, metrics, 0)
    # the base point of the sweep is `gen step`'s single evaluation of the same split
    one = table.iloc[0]
    assert one.lowered_sequences_per_second == pytest.approx(
        llama.result.sequences_per_second, rel=1e-9)
    assert sum(one[f"lowered_{p}_time"] for p in step.PARTS) == pytest.approx(
        one.lowered_step_time, rel=1e-12)
    # twice the nodes: the same kernels per micro-batch, half the micro-batches
    assert table.lowered_gemm_time[1] == pytest.approx(table.lowered_gemm_time[0] / 2)
    # 3 nodes: 96 ranks, DP 12 does not divide the batch of 1024
    assert not table.lowered_valid[2] and np.isnan(table.lowered_step_time[2])
    assert table.lowered_valid.dtype == bool


def test_core_variant_by_hand():
    base, params, _ = step_cli.resolve("trn1.32xlarge")
    assert step_sweep.core_variant(base, base.values) == params
    point = {**base.values, "rows": 64, "cols": 256, "clock": 2.0e9, "sbuf": 16 * 2**20,
             "hbm_bandwidth": 400e9}
    v = step_sweep.core_variant(base, point)
    assert (v.rows, v.cols, v.clock("tensor"), v.clock("vector")) == \
        (64, 256, 2.0e9, params.clock("vector"))
    assert (v.tensor.rows, v.tensor.cols) == (64, 256)
    # 16 MiB over 128 partitions; DMA: the lower of 16 engines x 17 GB/s and 400 GB/s / 2
    assert v.sbuf_bytes == 131072
    assert v.dma_bandwidth == pytest.approx(200e9)
