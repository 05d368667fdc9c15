"""Workload GEMM and FLOP counts against figures worked out by hand."""

import re

import pytest

from explore import workloads
from specs.errors import SpecError


def test_7b_training_step_flops_by_hand():
    w = workloads.load("llama2-7b")
    h, L, ffn, vocab, seq, batch = 4096, 32, 11008, 32000, 4096, 1024
    tokens = batch * seq
    params = L * (4 * h * h + 3 * h * ffn + 2 * h) + 2 * vocab * h + h
    assert workloads.transformer_params(workloads.load_spec("llama2-7b")) == params
    assert params == pytest.approx(6.74e9, rel=0.001)
    # Every weight but the input embedding and the norms is one GEMM operand: forward 2, backward
    # 4 FLOPs per weight and token (the 6 x params x tokens rule) ...
    linear = 6 * (params - vocab * h - (2 * L + 1) * h) * tokens
    # ... plus attention: scores and values, 2 x seq^2 x head_dim FLOPs per head and sequence
    # each, half of them under the causal mask, times 3 for the backward pass.
    attention = 3 * 2 * (2 * seq * seq * (h // 32)) * 32 * batch * L * 0.5
    assert w.flops() == pytest.approx(linear + attention, rel=1e-12)
    assert w.tokens == tokens
    # Forward GEMMs: 6 kinds + LM head; each has a dgrad and a wgrad of the same FLOPs.
    fwd = [n for n in w.gemms.names if not n.endswith(("dgrad", "wgrad"))]
    assert fwd == ["qkv", "attn.scores", "attn.values", "attn.out", "ffn.up", "ffn.down",
                   "lm_head"]
    assert len(w.gemms.names) == 3 * len(fwd)
    # Collectives: 4 tensor-parallel all-reduces per layer of tokens x hidden BF16 activations,
    # one gradient all-reduce of the BF16 gradients.
    assert w.tp_allreduces == 4 * 32
    assert w.tp_bytes == tokens * h * 2
    assert w.dp_bytes == params * 2


def test_70b_grouped_query_attention_shapes():
    w = workloads.load("llama2-70b")
    h, kv = 8192, 8 * 128
    i = w.gemms.names.index("qkv")
    assert (w.gemms.m[i], w.gemms.k[i], w.gemms.n[i]) == (h + 2 * kv, h, 512 * 4096)
    params = 80 * (h * (h + 2 * kv) + h * h + 3 * h * 28672 + 2 * h) + 2 * 32000 * h + h
    assert workloads.transformer_params(workloads.load_spec("llama2-70b")) == params
    linear = 6 * (params - 32000 * h - (2 * 80 + 1) * h) * 512 * 4096
    attention = 3 * 2 * (2 * 4096 * 4096 * 128) * 64 * 512 * 80 * 0.5
    assert w.flops() == pytest.approx(linear + attention, rel=1e-12)


def test_backward_gemms_swap_dimensions_and_keep_flops():
    w = workloads.load("llama2-7b")
    g = w.gemms
    i, d, k = (g.names.index(n) for n in ("ffn.down", "ffn.down.dgrad", "ffn.down.wgrad"))
    # forward (M=hidden, K=ffn, N=tokens); dgrad (M=ffn, K=hidden, N=tokens);
    # wgrad (M=ffn, K=tokens, N=hidden)
    assert (g.m[i], g.k[i], g.n[i]) == (4096, 11008, 1024 * 4096)
    assert (g.m[d], g.k[d], g.n[d]) == (11008, 4096, 1024 * 4096)
    assert (g.m[k], g.k[k], g.n[k]) == (11008, 1024 * 4096, 4096)
    assert g.backward[d] and g.backward[k] and not g.backward[i]


def test_split_divides_work_by_tensor_and_data_degrees():
    w = workloads.load("llama2-7b")
    per_rank = w.gemms.split(tp=4, dp=16)
    assert per_rank.flops() == pytest.approx(w.flops() / 64, rel=1e-12)
    i = w.gemms.names.index("ffn.down")
    # row-parallel: K split by tensor; tokens N split by data
    assert (per_rank.m[i], per_rank.k[i], per_rank.n[i]) == (4096, 11008 / 4, 1024 * 4096 / 16)
    j = w.gemms.names.index("ffn.down.wgrad")
    assert (per_rank.m[j], per_rank.k[j], per_rank.n[j]) == (11008 / 4, 1024 * 4096 / 16, 4096)


def test_gemm_list_flops_by_hand():
    w = workloads.load("dit-xl-block")
    flops = 2 * (6912 * 1152 * 32 + 3456 * 1152 * 8192 + 256 * 72 * 256 * 512
                 + 72 * 256 * 256 * 512 + 1152 * 1152 * 8192 + 4608 * 1152 * 8192
                 + 1152 * 4608 * 8192)
    assert w.flops() == flops
    assert w.replicated and w.tp_allreduces == 0 and w.dp_bytes == 0


W = """workload:
  kind: transformer
  name: w
  layers: 2
  hidden: 64
  heads: 4
  ffn: 256
  seq: 16
  batch: 2
  params: 123456.0
"""


@pytest.mark.parametrize("text, message", [
    (W, "w.yaml:10:11: workload.params: expected params within 2% of 1.314e+05 (derived from "
        "the dimensions), found 1.235e+05"),
    (W.replace("transformer", "transfomer"),
     "w.yaml:2:9: workload.kind: expected a workload kind, found 'transfomer'; did you mean "
     "'transformer'? (legal: transformer, gemms)"),
    (W.replace("heads: 4", "heads: 5"),
     "w.yaml:1:1: workload: expected hidden (64) to be a multiple of heads (5)"),
    (W.replace("ffn: 256", "ffn: -1"),
     "w.yaml:7:8: workload.ffn: expected a value greater than 0, found -1 (int)"),
])
def test_workload_errors(tmp_path, text, message):
    f = tmp_path / "w.yaml"
    f.write_text(text)
    with pytest.raises(SpecError, match="^" + re.escape(message) + "$"):
        workloads.load(f)
