"""`gen serve`: continuous batching worked by hand on constant step times, the step times
taken from the engine, the trends of load (latency rising, throughput saturating), the seeded
draws, and the command line."""

import json
import re
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from explore import infer, infer_cli, serve, workloads
from explore.kerneltimes import KernelTimes
from explore.serve import Dist
from explore.workloads import Transformer
from generators.cli import main
from hdl.params import core_params
from specs.loader import load

#: One pass of the tiny model at TP 1 with every kernel 1 us: 3 layers of 12 kernels and 4
#: once (tests/test_infer.py `test_static_batching_by_hand`), a prefill and a decode step alike.
STEP = (3 * 12 + 4) * 1e-6


class Constant:
    """Kernel times of ``seconds`` for every run: the scheduler's arithmetic, not the
    kernels'."""

    def __init__(self, seconds):
        # the trn1 core of the systems the tests resolve (its attention's key block)
        self.seconds, self.computed, self.params = seconds, 0, core_params(load("trn1"))

    def __call__(self, kernel, shape, dtype):
        return self.seconds


def tiny() -> Transformer:
    t = Transformer.model_validate(dict(
        kind="transformer", name="tiny", layers=3, hidden=256, heads=4, kv_heads=2, ffn=512,
        vocab=1000, seq=512, batch=1, params=1.0, causal=True))
    return t.model_copy(update={"params": workloads.transformer_params(t)})


def engine(times=None, **values):
    base, params, lnc, _ = infer_cli.resolve("trn1.2xlarge", None)
    if values:
        base = replace(base, values={**base.values, **values})
    # compiled as gen serve compiles it by default: lengths in multiples of 128 tokens
    return infer.Engine(tiny(), base, times or KernelTimes(params), tp=1, lnc=lnc,
                        compiled=infer.Compilation(granule=128))


def constant(**values):
    return engine(Constant(1e-6), **values)


def approx(x):
    return pytest.approx(x, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("text, want", [
    ("fixed:128", Dist("fixed", 128, 128)), ("128", Dist("fixed", 128, 128)),
    ("uniform:64-512", Dist("uniform", 64, 512)), ("normal:512,128", Dist("normal", 512, 128)),
    ("normal:50.5,2.5", Dist("normal", 50.5, 2.5))])
def test_distribution_syntax(text, want):
    assert Dist.parse(text) == want
    assert Dist.parse(str(want)) == want


@pytest.mark.parametrize("text, message", [
    ("poisson:3", r"expected --input as fixed:N, uniform:A-B or normal:MEAN,STD, found "
                  r"'poisson:3'"),
    ("uniform:64", "found 'uniform:64'"), ("fixed:0", "a value of at least 1"),
    ("uniform:9-3", r"1 <= A <= B, found 'uniform:9-3'"), ("-5", "found '-5'")])
def test_distribution_errors(text, message):
    with pytest.raises(infer.InferError, match=message):
        Dist.parse(text, "--input")


def test_distribution_draws(seed):
    rng = np.random.default_rng(seed)
    u = Dist.parse("uniform:1-3").draw(rng, 3000)
    assert set(u.tolist()) == {1, 2, 3}
    n = Dist.parse("normal:512,128").draw(rng, 20000)
    assert abs(n.mean() - 512) < 5 * 128 / np.sqrt(20000)
    assert Dist.parse("normal:1,100").draw(rng, 1000).min() == 1
    assert (Dist.parse("fixed:7").draw(rng, 5) == 7).all()


def test_one_request_alone_by_hand():
    # a prefill step, then 4 decode steps: TTFT one pass, each token one more
    r, got = serve.simulate(constant(), [128], [5], arrivals=[0.25])
    assert r.ttft_p50 == r.ttft_p99 == approx(STEP)
    assert r.itl_p50 == r.itl_p99 == approx(STEP)
    assert got["finish"][0] == approx(0.25 + 5 * STEP)
    assert (r.prefill_steps, r.decode_steps, r.mean_batch) == (1, 4, 1.0)
    assert r.tokens_per_second == approx(5 / (5 * STEP))


def test_one_request_alone_takes_the_engines_steps():
    e = engine()
    r, got = serve.simulate(e, [100], [6], arrivals=[0.0])
    # the prompt padded to 128; the caches hold 101 .. 105 keys, padded to 128
    assert r.ttft_p50 == approx(sum(e.prefill((128,)).values()))
    assert np.allclose(got["gaps"], sum(e.decode_step(1, 128).values()), rtol=1e-12)
    r, got = serve.simulate(e, [128], [3], arrivals=[0.0])
    assert np.allclose(got["gaps"], sum(e.decode_step(1, 256).values()), rtol=1e-12)


def test_bucket_lists_take_the_place_of_the_granule():
    # compiled with a 256-token context bucket and 512- and 1,024-key decode buckets: the
    # prompt of 100 encoded at 256, every step of its caches of 101 .. 105 keys at 512
    base, params, lnc, _ = infer_cli.resolve("trn1.2xlarge", None)
    times = KernelTimes(params)
    e = infer.Engine(tiny(), base, times, tp=1, lnc=lnc,
                     compiled=infer.Compilation(False, (256,), (512, 1024), granule=128))
    plain = infer.Engine(tiny(), base, times, tp=1, lnc=lnc)
    r, got = serve.simulate(e, [100], [6], arrivals=[0.0])
    assert r.ttft_p50 == approx(sum(plain.prefill((256,)).values()))
    assert np.allclose(got["gaps"], sum(plain.decode_step(1, 512).values()), rtol=1e-12)
    with pytest.raises(infer.InferError, match="--input of at most the largest of "
                       "--context-buckets"):
        serve.simulate(e, [300], [6], arrivals=[0.0])


def test_max_batch_queues_the_second_request():
    # two clients at time 0, one slot: B waits for A's prefill and its two decode steps
    r, got = serve.simulate(constant(), [128, 128], [3, 3], concurrency=2, max_batch=1)
    assert got["first"].tolist() == approx([STEP, 4 * STEP])
    assert r.duration == approx(6 * STEP) and r.tokens_per_second == approx(6 / (6 * STEP))
    # two slots: one prefill of both, two decode steps of both
    r, got = serve.simulate(constant(), [128, 128], [3, 3], concurrency=2, max_batch=2)
    assert got["first"].tolist() == approx([STEP, STEP])
    assert (r.prefill_steps, r.decode_steps, r.mean_batch) == (1, 2, 2.0)
    assert r.duration == approx(3 * STEP)


def test_prefill_interleaves_with_decode():
    # A (4 tokens) at 0, B (2 tokens) at 1.5 steps: A prefill, A decode, B prefill while A
    # waits, A+B decode (B done), A decode
    r, got = serve.simulate(constant(), [128, 128], [4, 2], arrivals=[0.0, 1.5 * STEP])
    assert got["first"].tolist() == approx([STEP, 3 * STEP])
    assert got["finish"].tolist() == approx([5 * STEP, 4 * STEP])
    assert sorted(got["gaps"].tolist()) == approx([STEP, STEP, STEP, 2 * STEP])
    assert (r.prefill_steps, r.decode_steps) == (2, 3)
    assert r.mean_batch == approx(4 / 3)
    assert r.ttft_p50 == approx(np.percentile([STEP, 1.5 * STEP], 50))


def test_prefill_token_budget():
    # 256 padded prompt tokens a step: two prompts of 128 in the first prefill, the third
    # in the next (a prompt longer than the budget runs alone)
    r, got = serve.simulate(constant(), [128, 100, 128], [2, 2, 2], concurrency=3,
                            max_prefill_tokens=256)
    assert got["first"].tolist() == approx([STEP, STEP, 2 * STEP])
    r, got = serve.simulate(constant(), [1000, 128], [2, 2], concurrency=2,
                            max_prefill_tokens=256)
    assert got["first"].tolist() == approx([STEP, 2 * STEP])


def test_memory_admits_what_fits():
    e = constant()
    t, s = e.t, e.split
    mem = infer.memory(t, s, 1, 256, 128, "bf16")
    one = mem["weights"] + mem["kv_cache"] + mem["activations"]
    # HBM per rank for one request and half of another's KV cache: they run one at a time
    per_rank = one + 0.5 * mem["kv_cache"]
    small = constant(hbm_capacity=per_rank * e.per_chip)
    r, got = serve.simulate(small, [128, 128], [3, 3], concurrency=2)
    assert got["first"].tolist() == approx([STEP, 4 * STEP])
    with pytest.raises(infer.InferError, match=r"a request of 128 \+ 3000 tokens does not fit "
                                               r"one rank alone: .* GiB of HBM"):
        serve.simulate(small, [128], [3000], concurrency=1)


def test_concurrency_one_is_one_token_per_step():
    r, _ = serve.simulate(constant(), [128] * 10, [8] * 10, concurrency=1)
    assert r.tokens_per_second == approx(1 / STEP)
    assert r.ttft_p99 == approx(STEP) and r.mean_batch == 1.0
    # on the simulated kernels: 128 tokens in a prefill and 127 decode steps, about 1/TPOT
    e = engine()
    r, _ = serve.simulate(e, [128] * 4, [128] * 4, concurrency=1)
    tpot = e.tpot(1, 128, 127)
    assert r.tokens_per_second == pytest.approx(1 / sum(tpot.values()), rel=0.05)
    assert r.tokens_per_second < 1 / r.itl_p50


def test_latency_rises_with_rate_and_throughput_saturates(seed):
    e = engine()
    rates = [25, 100, 400, 1600, 6400]
    runs = serve.serve(e, requests=200, input_dist=Dist.parse("uniform:32-256"),
                       output_dist=Dist.parse("uniform:8-64"), seed=seed, rates=rates,
                       max_batch=8)
    # each figure rises with the rate, within the sampling noise of 200 requests: where a
    # figure barely moves (the p99 TTFT at light load, throughput and ITL once saturated), a
    # higher rate can draw a few percent below (up to 4 % in 600 seeds, e.g. 231536138)
    for name in ("ttft_p50", "ttft_p99", "itl_p50", "tokens_per_second", "mean_batch"):
        got = np.array([getattr(r, name) for r in runs])
        assert (got[1:] >= 0.9 * got[:-1]).all(), (name, got)
    # light load: all that is offered is served (36 tokens a request on average)
    assert runs[0].tokens_per_second == pytest.approx(25 * 36, rel=0.35)
    # saturated: no more than a full batch's tokens per shortest full decode step, and the
    # last quadrupling of the rate adds almost nothing
    ceiling = 8 / sum(e.decode_step(8, 128).values())
    assert runs[-1].tokens_per_second <= ceiling
    assert runs[-1].tokens_per_second == pytest.approx(runs[-2].tokens_per_second, rel=0.05)
    assert runs[-1].ttft_p50 > 100 * runs[0].ttft_p50


def test_seeded_and_deterministic(seed):
    e = constant()
    opts = dict(requests=50, input_dist=Dist.parse("uniform:16-300"),
                output_dist=Dist.parse("normal:20,8"), rates=[1e4, 3e4])
    a = serve.serve(e, seed=seed, **opts)
    assert a == serve.serve(e, seed=seed, **opts)
    assert a != serve.serve(e, seed=seed + 1, **opts)
    # every rate serves the same requests: the same tokens
    assert a[0].requests == a[1].requests == 50


def config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 3, "hidden_size": 256,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
        "vocab_size": 1000, "hidden_act": "silu", "max_position_embeddings": 512}))
    return str(path)


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_cli_table_json_and_plot(tmp_path):
    model = config(tmp_path)
    res = run("serve", "trn1.2xlarge", "--model", model, "--tp", "1", "--rate", "50,5000",
              "--requests", "40", "--input", "uniform:32-200", "--output", "fixed:16",
              "--max-batch", "4", "--plot", str(tmp_path / "curve"))
    assert res.exit_code == 0, res.output
    assert "TTFT P50 ms" in res.output and "40 requests" in res.output
    assert (tmp_path / "curve.png").stat().st_size > 0 and (tmp_path / "curve.svg").exists()
    res = run("serve", "trn1.2xlarge", "--model", model, "--tp", "1", "--concurrency", "2",
              "--requests", "6", "--output", "8", "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    (one,) = out["runs"]
    assert one["mode"] == "concurrency" and one["load"] == 2 and one["requests"] == 6
    assert one["tokens_per_second"] == pytest.approx(6 * 8 / one["duration"])


@pytest.mark.parametrize("args, message", [
    (["--rate", "1"], "error: expected --input as fixed:N, uniform:A-B or normal:MEAN,STD, "
                      "found 'wide'"),
    (["--input", "64"], "error: expected one of --rate or --concurrency, found neither"),
    (["--rate", "1", "--concurrency", "2", "--input", "64"],
     "error: expected one of --rate or --concurrency, found both"),
    (["--rate", "0", "--input", "64"], "error: expected a rate above 0 requests per second"),
    (["--rate", "1", "--input", "500"], "error: expected --input \\+ --output of at most"),
    (["--concurrency", "0", "--input", "64"], "error: expected a concurrency of at least 1"),
])
def test_cli_errors_exit_2_with_one_line(tmp_path, args, message):
    args = ["--input", "wide", *args] if "--input" not in args else args
    res = run("serve", "trn1.2xlarge", "--model", config(tmp_path), "--tp", "1",
              "--requests", "3", *args)
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1
    assert re.match(message, res.output.strip()), res.output
