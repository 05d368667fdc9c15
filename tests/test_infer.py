"""`gen infer`: memory per rank and the static-batching figures worked by hand, refusals, the
command line's errors, Hugging Face configurations, and the published inference rows."""

import json
import math

import pytest
from click.testing import CliRunner

from explore import infer, infer_cli, infer_lowering, workloads
from explore.infer_published import tolerance
from explore.workloads import Transformer
from generators.cli import main
from hdl.params import core_params
from specs.loader import load


def run(*args):
    return CliRunner().invoke(main, list(args))


class Constant:
    """Kernel times of ``seconds`` for every run: the lowering's arithmetic, not the kernels'."""

    def __init__(self, seconds):
        # the trn1 core of the systems the tests resolve (its attention's key block)
        self.seconds, self.computed, self.params = seconds, 0, core_params(load("trn1"))
        self.seen = []

    def __call__(self, kernel, shape, dtype):
        self.seen.append((kernel, dict(shape), dtype))
        return self.seconds


def tiny(**over) -> Transformer:
    shape = dict(kind="transformer", name="tiny", layers=3, hidden=256, heads=4, kv_heads=2,
                 ffn=512, vocab=1000, seq=512, batch=1, params=1.0, causal=True)
    shape.update(over)
    t = Transformer.model_validate(shape)
    return t.model_copy(update={"params": workloads.transformer_params(t)})


def test_memory_per_rank_by_hand():
    t = workloads.load_spec("llama2-7b")
    s = infer_lowering.split(t, 24)
    # 32 heads padded to 2 per rank, 32 KV heads to 2, FFN 11008 to 459, vocabulary to 1334
    assert (s.q_heads, s.kv_heads, s.ffn, s.vocab, s.head_dim) == (2, 2, 459, 1334, 128)
    m = infer.memory(t, s, batch=1, context=4096, prompt_tokens=128, dtype="bf16")
    layer = 4096 * (2 + 2 * 2) * 128 + 2 * 128 * 4096 + 3 * 4096 * 459 + 2 * 4096
    weights = (32 * layer + 2 * 1334 * 4096 + 4096) * 2
    assert m["weights"] == weights == 651_796_480
    # batch x context x layers x KV heads per rank x head size x (k, v) x 2 bytes
    assert m["kv_cache"] == 1 * 4096 * 32 * 2 * 128 * 2 * 2 == 128 * 2**20
    assert m["activations"] == 128 * (4096 + 6 * 128 + 2 * 459) * 2 + 1334 * 4
    fp8 = infer.memory(t, s, batch=1, context=4096, prompt_tokens=128, dtype="fp8")
    assert fp8["weights"] == weights / 2 and fp8["kv_cache"] == m["kv_cache"]


def test_kv_heads_replicated_past_tp():
    t = workloads.load_spec("llama3-70b")
    s = infer_lowering.split(t, 32)
    assert (s.q_heads, s.kv_heads) == (2, 1)   # 8 KV heads on 32 ranks: one each
    m = infer.memory(t, s, batch=4, context=1152, prompt_tokens=512, dtype="bf16")
    assert m["kv_cache"] == 4 * 1152 * 80 * 1 * 128 * 2 * 2


def test_static_batching_by_hand():
    # every kernel run 1 us, TP 1 (no collectives): a layer of a gated rotary decoder is 12
    # kernels (norm, QKV, RoPE, KV append, attention, output, residual, norm, FFN up,
    # SwiGLU, FFN down, residual) and a pass adds 4 (embedding, final norm, head, sampling)
    t, times = tiny(), Constant(1e-6)
    base, _, lnc, _ = infer_cli.resolve("trn1.2xlarge", None)
    engine = infer.Engine(t, base, times, tp=1, lnc=lnc)
    r = infer.evaluate(engine, batch=4, input_len=100, output_len=50, dp=2)
    per_pass = (3 * 12 + 4) * 1e-6
    assert r.ttft == pytest.approx(per_pass) and r.tpot == pytest.approx(per_pass)
    assert r.latency == pytest.approx(per_pass + 50 * per_pass)
    assert r.tokens_per_second == pytest.approx(2 * 4 * 50 / (51 * per_pass))
    assert r.prefill["communication"] == r.prefill["overheads"] == 0.0
    # prompts of 100 tokens, within trn1's key block of 512: attention on the tokens' rows,
    # which the QKV GEMM writes and the output GEMM reads (gemm_rows); the FFN's GEMMs take
    # the 400 prompt tokens, more than their contraction, as their moving side; the decode's
    # batch, fewer tokens than the contraction, is rows of the stationary (gemm_rows)
    gemms = [(k, s) for k, s, _ in times.seen if k.startswith("gemm")]
    assert ("attention_rows_causal", {"H": 4, "B": 4, "S": 100, "D": 64}, "bf16") \
        in times.seen
    assert ("gemm_rows", {"M": 400, "K": 256, "N": (4 + 2 * 2) * 64}) in gemms
    assert ("gemm_rows", {"M": 400, "K": 256, "N": 256}) in gemms
    assert ("gemm", {"M": 2 * 512, "K": 256, "N": 400}) in gemms
    assert ("gemm_rows", {"M": 4, "K": 256, "N": (4 + 2 * 2) * 64}) in gemms
    # decode attention over every context the trapezoid rule samples: 101 .. 150
    contexts = sorted({s["S"] for k, s, _ in times.seen if k == "decode_attention"})
    assert contexts == [101, 113, 126, 138, 150]


def test_prompts_past_a_key_block_take_attention_head_after_head():
    """A prompt longer than trn1's key block of 512: the flash kernel head after head (keys
    streamed), the GEMMs by their own rule: 700 tokens, fewer than the contraction (1,024
    and 2,048) but more than a moving tile of 512, are the plain GEMM's moving side."""
    t, times = tiny(seq=1024, hidden=1024, heads=16, ffn=2048), Constant(1e-6)
    base, _, lnc, _ = infer_cli.resolve("trn1.2xlarge", None)
    infer.Engine(t, base, times, tp=1, lnc=lnc).prefill((600, 100))
    assert ("attention_causal", {"B": 16, "S": 600, "D": 64}, "bf16") in times.seen
    assert ("attention_causal", {"B": 16, "S": 100, "D": 64}, "bf16") in times.seen
    assert ("gemm", {"M": (16 + 2 * 2) * 64, "K": 1024, "N": 700}, "bf16") in times.seen
    assert ("gemm", {"M": 1024, "K": 2048, "N": 700}, "bf16") in times.seen
    assert not any(k.startswith("attention_rows") or k == "gemm_rows" and s["M"] == 700
                   for k, s, _ in times.seen)


def test_tpot_averages_the_growing_context():
    # decode attention's time grows with the cache; the average of an affine step time over
    # contexts 101 .. 150 is its value at the middle, 125.5
    class Linear(Constant):
        def __call__(self, kernel, shape, dtype):
            return 1e-6 * shape["S"] if kernel == "decode_attention" else 0.0

    t = tiny()
    base, _, lnc, _ = infer_cli.resolve("trn1.2xlarge", None)
    engine = infer.Engine(t, base, Linear(0.0), tp=1, lnc=lnc)
    tpot = engine.tpot(1, 100, 50)
    assert tpot["attention"] == pytest.approx(3 * 125.5e-6, rel=1e-3)


def test_buckets_pad_the_prompt_and_the_decode_cache():
    # prompts of 100 tokens encoded at the 128 bucket: the prefill of 128-token prompts;
    # contexts 101 .. 300 decoded at buckets 128 (28 contexts), 256 (128) and 512 (44)
    class Linear(Constant):
        def __call__(self, kernel, shape, dtype):
            self.seen.append((kernel, dict(shape), dtype))
            return 1e-6 * shape["S"] if kernel == "decode_attention" else 1e-6

    t = tiny()
    base, _, lnc, _ = infer_cli.resolve("trn1.2xlarge", None)
    compiled = infer.Compilation(False, (256, 128), (512, 128, 256))
    assert compiled.context_buckets == (128, 256) and compiled.decode_buckets[-1] == 512
    times = Linear(0.0)
    engine = infer.Engine(t, base, times, tp=1, lnc=lnc, compiled=compiled)
    plain = infer.Engine(t, base, Linear(0.0), tp=1, lnc=lnc)
    assert engine.prefill((100, 100)) == plain.prefill((128, 128))
    assert {s["S"] for k, s, _ in times.seen if k.startswith("attention")} == {128}
    tpot = engine.tpot(1, 100, 200)
    assert tpot["attention"] == pytest.approx(
        3 * 1e-6 * (28 * 128 + 128 * 256 + 44 * 512) / 200)
    assert {s["S"] for k, s, _ in times.seen if k == "decode_attention"} == {128, 256, 512}
    # the cache is held at the last context's bucket: 300 keys in 512
    r = infer.evaluate(engine, batch=1, input_len=100, output_len=200)
    assert r.memory["kv_cache"] == infer.memory(t, engine.split, 1, 512, 128, "bf16")[
        "kv_cache"]
    with pytest.raises(infer.InferError, match=r"--input of at most the largest of "
                       r"--context-buckets \(256\), found 300"):
        engine.prefill((300,))
    with pytest.raises(infer.InferError, match=r"--input \+ --output of at most the largest "
                       r"of --decode-buckets \(512\), found 600"):
        engine.tpot(1, 100, 500)
    with pytest.raises(infer.InferError, match="positive token counts, found 0, 128"):
        infer.Compilation(False, (0, 128))


def test_sequence_parallel_shards_the_norms_residuals_and_embedding():
    # 4 prompts of 100 tokens on TP 8: each rank's norms, residual adds and embedding on 50
    # of the 400 tokens; the GEMMs, RoPE, attention and cache write on all; the same
    # communication (a gather and a reduce-scatter are the halves of an all-reduce)
    t = tiny(hidden=512, heads=8, kv_heads=8, ffn=1024)
    base, _, lnc, _ = infer_cli.resolve("trn1.32xlarge", None)
    sp, plain = Constant(1e-6), Constant(1e-6)
    on = infer.Engine(t, base, sp, tp=8, lnc=lnc, compiled=infer.Compilation(True))
    off = infer.Engine(t, base, plain, tp=8, lnc=lnc)
    a, b = on.prefill((100,) * 4), off.prefill((100,) * 4)
    assert a["communication"] == b["communication"] > 0
    changed = [(k, s[next(iter(s))], s2[next(iter(s2))])
               for (k, s, _), (k2, s2, _) in zip(sp.seen, plain.seen, strict=True)
               if s != s2 or k != k2]
    # per layer 2 norms and 2 residual adds (run once per layer by the engine), once the
    # embedding (the final norm is of the 4 last tokens either way): rows of 50 and 400
    # tokens, a residual add's 2,048-element rows 50 x 512 / 2,048 and 400 x 512 / 2,048
    assert sorted(changed) == [("residual_add", 13, 100)] * 3 + [("rmsnorm", 50, 400)] * 2
    # a decode step is the same either way
    on.decode_step(4, 300)
    off.decode_step(4, 300)
    assert sp.seen[-16:] == plain.seen[-16:]


def test_a_logical_cores_physical_cores_divide_each_kernels_split_key():
    # LNC 2 on trn2: a decode GEMM on rows (its M the batch of 1) divides its weights'
    # columns N between the two cores; the other kernels divide their first key
    t = tiny()
    base, _, lnc, _ = infer_cli.resolve("trn2.48xlarge", 2)
    times = Constant(1e-6)
    engine = infer.Engine(t, base, times, tp=1, lnc=lnc)
    engine.decode_step(1, 200)
    seen = {(k, tuple(s.items())) for k, s, _ in times.seen}
    qkv = (256 // 4) * (4 + 2 * 2)  # (q + 2 kv heads) x head size
    assert ("gemm_rows", (("M", 1), ("K", 256), ("N", qkv // 2))) in seen
    assert ("gemm_rows", (("M", 1), ("K", 512), ("N", 128))) in seen  # FFN-down's 256
    assert ("rmsnorm", (("R", 1), ("C", 256))) in seen   # R of 1 stays 1


def test_kernel_rows_by_hand():
    # every kernel run 1 us: a row's seconds are its runs, layers x its count for a layer's
    # kernel, its count for a pass's; the rows of a part add up to the part
    t, times = tiny(), Constant(1e-6)
    base, _, lnc, _ = infer_cli.resolve("trn1.2xlarge", None)
    engine = infer.Engine(t, base, times, tp=1, lnc=lnc)
    rows = engine.prefill_kernels((100,) * 4)
    assert [(r.what, r.runs) for r in rows[:3]] == [("norm", 3), ("qkv", 3), ("rope", 3)]
    assert [(r.what, r.runs) for r in rows[-4:]] == [("embedding", 1), ("final.norm", 1),
                                                      ("lm_head", 1), ("sample", 1)]
    assert all(r.seconds == pytest.approx(1e-6 * r.runs) for r in rows)
    parts = engine.prefill((100,) * 4)
    for part in ("gemm", "attention", "other"):
        assert sum(r.seconds for r in rows if r.part == part) == pytest.approx(parts[part])
    # decode: each row averaged over the contexts as the parts are; its shape the last's
    rows = engine.tpot_kernels(4, 100, 50)
    step = engine.tpot(4, 100, 50)
    for part in ("gemm", "attention", "other"):
        assert sum(r.seconds for r in rows if r.part == part) == pytest.approx(step[part])
    assert [r.shape["S"] for r in rows if r.kernel == "decode_attention"] == [150]


def test_cli_lists_the_kernels():
    result = run("infer", "inf2.xlarge", "bert-base", "--tp", "1", "--dp", "2", "--kernels",
                 "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    rows = doc["kernels"]["prefill"]
    assert set(doc["kernels"]) == {"prefill"}  # an encoder has one pass
    assert sum(r["seconds"] for r in rows if r["part"] == "attention") == pytest.approx(
        doc["prefill_attention_s"])
    assert {r["kernel"] for r in rows} >= {"attention_rows", "gemm_rows", "layernorm"}
    table = run("infer", "inf2.xlarge", "bert-base", "--tp", "1", "--dp", "2", "--kernels")
    assert table.exit_code == 0 and "kernels of the pass on a rank" in table.output


def test_encoder_pass_and_rate():
    t, times = tiny(causal=False, gated_ffn=False, norm="layernorm", positions="learned",
                    kv_heads=None, tied_embeddings=True), Constant(1e-6)
    base, _, lnc, _ = infer_cli.resolve("trn1.2xlarge", None)
    engine = infer.Engine(t, base, times, tp=1, lnc=lnc)
    r = infer.evaluate(engine, batch=2, input_len=128, output_len=0, dp=2)
    # a layer: norm, QKV, attention, output, residual, norm, FFN up + GELU, FFN down,
    # residual (9); a pass: embedding, positions, final norm, pooler (4)
    assert r.latency == pytest.approx((3 * 9 + 4) * 1e-6)
    assert r.inferences_per_second == pytest.approx(2 * 2 / r.latency)
    assert math.isnan(r.tokens_per_second) and r.tpot == 0.0
    assert r.memory["kv_cache"] == 0.0


def test_refused_when_it_does_not_fit():
    with pytest.raises(infer.InferError, match=r"llama3.1-405b at TP 24, batch 1, context 256 "
                       r"does not fit: 32\.\d\d GiB per rank \(weights 32\.\d\d, kv cache "
                       r"0\.\d\d, activations 0\.\d\d GiB\) against the 16\.00 GiB"):
        infer_cli.from_cli("inf2.48xlarge", "llama3.1-405b", tp=24, times=Constant(0.0))


@pytest.mark.parametrize("options, message", [
    (dict(tp=32, dp=2), r"TP x DP \(32 x 2\) of at most the 32 logical cores"),
    (dict(tp=16, lnc=2), r"--lnc one of 1 on trn1, found 2"),
    (dict(tp=16, input_len=4000, output_len=200), r"at most the 4096-token context"),
    (dict(tp=16, dtype="int4"), r"--dtype one of bf16, fp8, found 'int4'"),
    (dict(tp=0), r"--tp of at least 1, found 0"),
])
def test_refusals(options, message):
    with pytest.raises(infer.InferError, match=message):
        infer_cli.from_cli("trn1.32xlarge", "llama2-7b", times=Constant(0.0), **options)


def llama_config(tmp_path, **over):
    cfg = {"model_type": "llama", "_name_or_path": "meta-llama/Llama-2-7b-hf",
           "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
           "hidden_act": "silu", "tie_word_embeddings": False,
           "max_position_embeddings": 4096}
    cfg.update(over)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_hf_config_is_the_bundled_model(tmp_path):
    t = infer_cli.hf_config(llama_config(tmp_path))
    bundled = workloads.load_spec("llama2-7b")
    for k in ("layers", "hidden", "heads", "ffn", "vocab", "gated_ffn", "norm", "positions",
              "causal", "tied_embeddings", "max_context", "act"):
        assert getattr(t, k) == getattr(bundled, k), k
    assert t.name == "Llama-2-7b-hf"
    opt = infer_cli.hf_config(llama_config(
        tmp_path, model_type="opt", intermediate_size=None, ffn_dim=20480, hidden_act=None,
        activation_function="relu", hidden_size=5120, num_attention_heads=40,
        num_key_value_heads=None, num_hidden_layers=40, vocab_size=50272,
        tie_word_embeddings=None, max_position_embeddings=2048))
    ref = workloads.load_spec("opt-13b")
    for k in ("layers", "hidden", "heads", "ffn", "vocab", "gated_ffn", "norm", "positions",
              "tied_embeddings", "act"):
        assert getattr(opt, k) == getattr(ref, k), k


@pytest.mark.parametrize("over, message", [
    (dict(num_hidden_layers=None), r"config.json: num_hidden_layers: expected a positive "
                                   r"integer, found none"),
    (dict(hidden_size="4096"), r"config.json: hidden_size: expected a positive integer, "
                               r"found '4096'"),
    (dict(model_type="gpt2"), r"config.json: model_type: expected one of llama, mistral, "
                              r"opt, bert, roberta, found 'gpt2'"),
    (dict(num_key_value_heads=5), r"num_key_value_heads: expected a divisor"),
])
def test_cli_bad_config_is_one_line(tmp_path, over, message):
    import re

    result = run("infer", "trn1.32xlarge", "--model", str(llama_config(tmp_path, **over)),
                 "--tp", "8")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and re.search(message, lines[0]), result.output


@pytest.mark.parametrize("args, message", [
    (["infer", "trn1.32xlarge", "no-such-model", "--tp", "8"], "no-such-model"),
    (["infer", "trn1.32xlarge", "--tp", "8"], "expected a MODEL or --model"),
    (["infer", "trn1", "llama2-7b", "--tp", "8"], "expected an instance system spec"),
    (["infer", "trn1.32xlarge", "llama2-7b", "--tp", "8", "--dp", "5"],
     "TP x DP (8 x 5)"),
    (["infer", "trn1.32xlarge", "llama2-7b", "--tp", "8,16", "--kernels"],
     "expected one design point with --kernels, found lists of --tp"),
    (["infer", "trn1.32xlarge", "llama2-7b", "--tp", "8", "--input", "3000",
      "--context-buckets", "1024,2048"],
     "expected --input of at most the largest of --context-buckets (2048), found 3000"),
    (["infer", "trn1.32xlarge", "llama2-7b", "--tp", "8", "--decode-buckets", "0,256"],
     "expected --decode-buckets of positive token counts, found 0, 256"),
])
def test_cli_errors_exit_2_with_one_line(args, message):
    result = run(*args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output


#: The trn2 tutorial's compilation, as its command line gives it: --sequence-parallel-enabled,
#: --context-encoding-buckets 2048 4096 8192 12288, --token-generation-buckets 2048 4096 8192
#: 12800.
TUTORIAL = infer.Compilation(True, (2048, 4096, 8192, 12288), (2048, 4096, 8192, 12800))
#: The trn2 Llama-3.1-405B tutorial's base case: --sequence-parallel-enabled,
#: --context-encoding-buckets 2048 4096 10240 12288, --token-generation-buckets 12800.
TUTORIAL_405B = infer.Compilation(True, (2048, 4096, 10240, 12288), (12800,))

#: Published inference results: system, model, `gen infer` options, published figures
#: (seconds, per second), source (sources.yaml). The inf2 Llama-2-7B row is the "Real Time"
#: row of latency_data_decoder.csv (sequence length 4,096); the trn1 row is Llama-3-70B at
#: sequence length 1,152; both Transformers NeuronX 2.18, compiled with its default buckets
#: for their sequence lengths [TNX-GUIDE]; trn2's is the LLMPerf P50 of the NxD Inference
#: tutorial, compiled as it says (its TPOT the LLMPerf inter-token latency, as the 405B
#: tutorial's base case, beside it); the inf2 BERT row is Neuron 2.26's bert-base-uncased, data
#: parallel on the instance's two cores.
PUBLISHED = {
    "inf2-llama2-7b": ("inf2.48xlarge", "llama2-7b",
                       dict(tp=24, batch=1, input_len=128, output_len=3968,
                            compiled=infer.Compilation.transformers_neuronx(4096)),
                       dict(tokens_per_second=156.1, tpot=6.47e-3, ttft=27.6e-3),
                       "NEURON-INF2-INFER"),
    "trn1-llama3-70b": ("trn1.32xlarge", "llama3-70b",
                        dict(tp=32, batch=1, input_len=128, output_len=1024,
                             compiled=infer.Compilation.transformers_neuronx(1152)),
                        dict(tokens_per_second=40.64, tpot=24.48e-3, ttft=53.2e-3),
                        "NEURON-TRN1-INFER"),
    "trn2-llama3.3-70b": ("trn2.48xlarge", "llama3.3-70b",
                          dict(tp=64, lnc=2, batch=1, input_len=10000, output_len=1500,
                               compiled=TUTORIAL),
                          dict(tpot=19.6e-3, ttft=814.2e-3), "NXDI-TRN2-70B"),
    "trn2-llama3.1-405b": ("trn2.48xlarge", "llama3.1-405b",
                           dict(tp=64, lnc=2, batch=1, input_len=10000, output_len=1500,
                                compiled=TUTORIAL_405B),
                           dict(tpot=37.93e-3, ttft=2.442), "NXDI-TRN2-405B"),
    "inf2-bert-base": ("inf2.xlarge", "bert-base", dict(tp=1, dp=2, batch=1, input_len=128),
                       dict(latency=1.00e-3, inferences_per_second=1998.0),
                       "NEURON-INF2-INFER"),
}
#: Tolerance of each figure (the issue's: TTFT 35 %, the rest 25 %).
#: Figures outside their tolerance: (anchor, figure) -> (predicted, published) as this tree
#: predicts them (benchmarks/infer.md gives the breakdown of each gap). inf2's TTFT is under
#: the published figure (its compilation, buckets included, is not published with the row,
#: and host work is not modelled); trn2 Llama-3.3-70B's decode step is under: its GEMMs stream
#: a rank's 2.2 GB of weights over both cores of the logical core in 5.5 ms, and what else a
#: step of 80 layers pays (launches, the collectives' start-up) no source gives; the BERT
#: pass at batch 1 is over: each of its kernels
#: pays its start-up and tail alone (each is timed by itself), where the compiled model
#: runs them as one program.
KNOWN_GAPS = {
    ("inf2-llama2-7b", "ttft"): (11.05e-3, 27.6e-3),
    ("trn2-llama3.3-70b", "tpot"): (14.73e-3, 19.6e-3),
    ("inf2-bert-base", "latency"): (1.807e-3, 1.00e-3),
    ("inf2-bert-base", "inferences_per_second"): (1106.5, 1998.0),
}
WITHIN = [(a, f) for a, row in PUBLISHED.items() for f in row[3] if (a, f) not in KNOWN_GAPS]


def predicted(result, figure):
    return getattr(result, figure)


@pytest.fixture(scope="module")
def anchors():
    return {a: infer_cli.from_cli(system, name, **options).result
            for a, (system, name, options, _, _) in PUBLISHED.items()}


def test_published_sources_are_known():
    from specs.loader import sources

    assert {row[4] for row in PUBLISHED.values()} <= set(sources())
    assert set(KNOWN_GAPS) <= {(a, f) for a, row in PUBLISHED.items() for f in row[3]}


@pytest.mark.parametrize("anchor, figure", WITHIN)
def test_published_within_tolerance(anchors, anchor, figure):
    published = PUBLISHED[anchor][3][figure]
    assert predicted(anchors[anchor], figure) == pytest.approx(
        published, rel=tolerance(figure))


@pytest.mark.parametrize("anchor, figure", sorted(KNOWN_GAPS))
def test_known_gaps_are_as_listed(anchors, anchor, figure):
    # the list states what the tree predicts: a figure that moved is a list to update
    expected, published = KNOWN_GAPS[(anchor, figure)]
    assert published == PUBLISHED[anchor][3][figure]
    assert predicted(anchors[anchor], figure) == pytest.approx(expected, rel=0.05)


def test_grid_sweeps_every_combination(tmp_path):
    result = run("infer", "trn1.32xlarge", "llama2-7b", "--tp", "8,64", "--batch", "1,2",
                 "-o", str(tmp_path / "g.parquet"))
    assert result.exit_code == 0, result.output
    import pandas as pd

    table = pd.read_parquet(tmp_path / "g.parquet")
    assert len(table) == 4 and sorted(set(table["tp"])) == [8, 64]
    refused = table[table["refused"] != ""]
    assert set(refused["tp"]) == {64}   # 64 ranks on 32 logical cores
    ok = table[table["refused"] == ""]
    assert (ok["tokens_per_second"] == ok["batch"] * 128
            / (ok["ttft_s"] + 128 * ok["tpot_s"])).all()


def test_grid_and_point_take_the_compilation():
    # a 100-token prompt compiled for a 128 bucket: every figure of the 128-token prompt
    # (the grid's and the one point's), its output of 28 tokens ending at the same context
    def figures(*args):
        result = run("infer", "trn1.32xlarge", "llama2-7b", "--format", "json", *args)
        assert result.exit_code == 0, result.output
        rows = json.loads(result.output)
        return [{k: r[k] for k in ("ttft_s", "tpot_s", "memory_bytes")}
                for r in (rows if isinstance(rows, list) else [rows])]

    padded = figures("--tp", "8,16", "--input", "100", "--output", "28",
                     "--context-buckets", "128", "--decode-buckets", "256")
    plain = figures("--tp", "8,16", "--input", "128", "--output", "128",
                    "--decode-buckets", "256")
    one = figures("--tp", "8", "--input", "100", "--output", "28", "--context-buckets",
                  "128", "--decode-buckets", "256")
    for got, want in ((padded[0], one[0]), *zip(padded, plain, strict=True)):
        # every decode step at the 256 bucket: the same TPOT; the same cache and prompt
        assert got == {k: pytest.approx(v, rel=1e-8) for k, v in want.items()}
    # the point says how it was compiled, in its JSON and its table
    args = ("infer", "trn1.32xlarge", "llama2-7b", "--tp", "8", "--input", "100",
            "--sequence-parallel", "--context-buckets", "128", "--decode-buckets", "256")
    doc = json.loads(run(*args, "--format", "json").output)
    assert (doc["sequence_parallel"], doc["context_buckets"], doc["decode_buckets"]) == \
        (True, "128", "256")
    assert "compiled       sequence-parallel prefill; context buckets 128; decode buckets " \
        "256" in run(*args).output
