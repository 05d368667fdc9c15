"""Inference as sweep metrics of `gen explore`: the base point is `gen infer`'s figure with the
instance filled by replicas, serving configurations expand into workloads, memory decides
`infer_fits`, and the Pareto plot of throughput against time per output token is drawn."""

import numpy as np
import pytest

from explore import infer_cli, infer_sweep, run, sweep

SWEEP = """\
sweep:
  name: serving-test
  base: trn1.2xlarge
  parameters:
    hbm_capacity: [1 GiB, 32 GiB]
    link_bandwidth: [192 GiB/s, 384 GiB/s]
  workloads:
    - {name: llama2-7b, tensor: 1, serving: {batch: [1, 2], input: 128, output: 16}}
  metrics: [valid, price_per_hour, infer_ttft, infer_tpot, infer_latency,
            infer_tokens_per_second, infer_tokens_per_dollar, infer_replicas,
            infer_memory_bytes, infer_valid, infer_fits]
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweep")
    (d / "s.yaml").write_text(SWEEP)
    summary = run.explore(d / "s.yaml", d / "out", progress=False)
    import pandas as pd

    return sweep.load(d / "s.yaml"), pd.read_parquet(summary["table"]), summary


def test_serving_expands_into_workloads(swept):
    sw, table, _ = swept
    assert [w.name for w in sw.workloads] == ["llama2-7b-tp1-b1-128x16",
                                              "llama2-7b-tp1-b2-128x16"]
    assert [w.serving for w in sw.workloads] == infer_sweep.expand([1, 2], [128], [16],
                                                                   ["bf16"])
    assert len(table) == 4 * 2


def test_base_point_is_gen_infer_with_the_instance_filled(swept):
    sw, table, _ = swept
    base = table[(table.workload == "llama2-7b-tp1-b2-128x16")
                 & np.isclose(table.hbm_capacity, 32 * 2**30)
                 & np.isclose(table.link_bandwidth, sw.base.values["link_bandwidth"])]
    (row,) = base.itertuples()
    # trn1.2xlarge: 2 logical cores, TP 1: two replicas
    p = infer_cli.from_cli("trn1.2xlarge", "llama2-7b", tp=1, dp=2, batch=2, input_len=128,
                           output_len=16)
    assert row.infer_replicas == 2
    assert row.infer_tpot == pytest.approx(p.result.tpot, rel=1e-12)
    assert row.infer_ttft == pytest.approx(p.result.ttft, rel=1e-12)
    assert row.infer_tokens_per_second == pytest.approx(p.result.tokens_per_second, rel=1e-12)
    assert row.infer_tokens_per_second == pytest.approx(2 * 2 * 16 / row.infer_latency)
    assert row.infer_tokens_per_dollar == pytest.approx(
        row.infer_tokens_per_second * 3600 / row.price_per_hour)
    assert row.infer_memory_bytes == pytest.approx(sum(p.result.memory.values()))


def test_memory_decides_fits_and_tp1_has_no_collectives(swept):
    _, table, _ = swept
    assert table.infer_fits.dtype == bool and table.infer_valid.all()
    # 13.5 GB of bf16 weights: not in 1 GiB per chip, in 32 GiB (two cores, 16 GiB each)
    assert (table.infer_fits == (table.hbm_capacity > 2**31)).all()
    # TP 1: the link bandwidth changes nothing
    for _, g in table.groupby(["workload", "hbm_capacity"], observed=True):
        assert np.ptp(g.infer_tpot.to_numpy()) == 0


def test_tp_beyond_the_ranks_is_not_valid(tmp_path):
    (tmp_path / "s.yaml").write_text(SWEEP.replace("tensor: 1", "tensor: 4"))
    sw = sweep.load(tmp_path / "s.yaml")
    points, _ = sw.points()
    table = run.evaluate_chunk(points, sw.base, sw.workloads[0], sw.spec.metrics, 0)
    assert not table.infer_valid.any() and np.isnan(table.infer_tpot).all()


def test_pareto_plot_is_drawn(swept):
    _, _, summary = swept
    assert any(p.endswith("pareto_inference.png") for p in summary["plots"])


def test_serving_needs_a_decoder(tmp_path):
    (tmp_path / "s.yaml").write_text(SWEEP.replace("llama2-7b", "bert-base"))
    with pytest.raises(sweep.SpecError, match=r"s.yaml:\d+:\d+: .*expected a decoder "
                                              r"transformer for a serving configuration"):
        sweep.load(tmp_path / "s.yaml")
