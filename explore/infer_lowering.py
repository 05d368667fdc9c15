"""Inference lowered to core kernels: the prefill (context encoding) of a batch of prompts and
one decode step (token generation) of a batch of sequences, on one rank of a tensor-parallel
group of ``tp`` (one logical NeuronCore).

**Split.** Tensor parallelism splits the attention heads, the columns of QKV and FFN-up and the
rows of the attention output and FFN-down, and the vocabulary of the LM head and the
embedding, Megatron-style. A count that ``tp`` does not divide is padded to the next multiple
(``ceil(n / tp)`` per rank), as Transformers NeuronX pads the heads of Llama-2-7B's 32 to
its 24 ranks on an inf2.48xlarge; key/value heads fewer than ``tp`` are replicated, one per
rank, as the published GQA runs do (Llama-3-70B's 8 at TP 32).

**Prefill** of prompts of lengths ``S_1 .. S_B`` (``T = sum S_i`` tokens), per layer: norm,
QKV GEMM (``M = (q + 2 kv) d``, ``K = hidden``, ``N = T``), RoPE on q and k (rotary models),
the KV-cache write of k and v (the append kernel writes one token per sequence, so each
prompt token is written as one: a block write of whole prompts would take fewer, larger
DMAs), attention over each prompt (the causal flash kernel for a decoder, the plain one for
an encoder; one kernel for all the local heads of the prompts of one length: on tokens'
rows, which the QKV GEMM then writes and the attention-output GEMM reads, where every
prompt's keys fit one block, else head after head), attention-output GEMM, residual add,
norm, FFN (SwiGLU: up and gate as one GEMM then the SwiGLU kernel; GELU: the fused
GEMM-bias-GELU kernel; ReLU: the same fused kernel, its activation a stand-in of the same
cost on the scalar engine, which empties PSUM either way), FFN-down GEMM, residual add.
Once: the embedding gather (a row copy of its size, as in training: the instruction set has
no indirect DMA), the learned positions' add where the model has them, the final norm and,
for a decoder, the LM head and the sampling step over the last token of each prompt (only
those logits are needed); an encoder ends with its pooler GEMM over the first token.
Sampling is greedy (the top 1 of each rank's vocabulary share). Sequence parallelism
(NxD Inference's, in the prefill) leaves each rank the norms, residual adds and embedding of
its ``ceil(T / tp)`` tokens; the GEMMs, RoPE, the cache write and attention see every token.

**Decode step** of ``B`` sequences whose caches hold ``L`` keys: the same layer with ``N = B``
(the batch is the GEMMs' moving side, so at small batch each GEMM's time is the loading of
its weights), RoPE and the KV-cache append of the new token, and decode attention of one
query per sequence over its cache (the flash-decoding kernel, split over the cache); then the
final norm, the LM head over ``B`` tokens and the sampling step.

GEMMs run in ``dtype`` (``bf16``; ``fp8``: weights stored and multiplied in fp8 e4m3, the
activations cast to it); attention, the KV cache and the rest stay in bf16.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from .step_lowering import Call, flat
from .workloads import Transformer

__all__ = ["GEMM_DTYPES", "Split", "decode", "prefill", "split"]

#: Kernel format of the GEMMs for each ``--dtype``.
GEMM_DTYPES = {"bf16": "bf16", "fp8": "fp8_e4m3"}
#: Format of everything that is not a GEMM (activations, attention, the KV cache).
ACT = "bf16"
_WIDE = 4096


@dataclass(frozen=True)
class Split:
    """Per-rank sizes of a model at tensor-parallel degree ``tp``."""

    tp: int
    head_dim: int
    q_heads: int
    kv_heads: int
    ffn: int
    vocab: int


def split(t: Transformer, tp: int) -> Split:
    """Heads, FFN columns and vocabulary per rank (padded; KV heads replicated past ``tp``)."""
    kv = t.kv_heads or t.heads
    return Split(tp=tp, head_dim=t.hidden // t.heads, q_heads=math.ceil(t.heads / tp),
                 kv_heads=math.ceil(kv / tp), ffn=math.ceil(t.ffn / tp),
                 vocab=math.ceil(t.vocab / tp) if t.vocab else 0)


def _call(what, kernel, part, dtype, count=1.0, **shape):
    return Call(what, kernel, tuple((k, int(v)) for k, v in shape.items()), dtype, count, part)


def _gemm(what, m, k, n, dtype, columns, kernel="gemm", rows=False):
    """out[m features, n tokens] = W[k, m].T @ x[k, n]; the activations as tokens' rows
    (gemm_rows: out[n, m] = x[n, k] @ W[k, m], the weights the moving side) where the tokens
    are fewer than the contraction and fit one moving tile of ``columns`` (past it the plain
    GEMM's moving tiles are whole, and turning the activations on chip is work for nothing),
    or with ``rows`` (the attention takes them so)."""
    if rows or n < k and n <= columns:
        rows = {"gemm": "gemm_rows", "gemm_bias_gelu": "gemm_rows_bias_gelu"}[kernel]
        return _call(what, rows, "gemm", dtype, M=n, K=k, N=m)
    return _call(what, kernel, "gemm", dtype, M=m, K=k, N=n)


def _rows(what, kernel, r, c):
    """A row-wise kernel; a row longer than its SBUF tiles is timed as ``ceil(c / 4096)``
    pieces (as training's norms and loss rows are)."""
    pieces = math.ceil(c / _WIDE)
    return _call(what, kernel, "other", ACT, R=r * pieces, C=math.ceil(c / pieces))


def _layer(t: Transformer, s: Split, tokens: int, dt: str, attention: list[Call],
           rope_and_cache: list[Call], columns: int, rows: bool = False,
           shard: int | None = None) -> list[Call]:
    """One layer; with ``rows`` the attention takes and writes tokens' rows, and so do the
    QKV and attention-output GEMMs; the norms and residual adds on ``shard`` tokens (a
    sequence-parallel rank's), else on all."""
    h, d = t.hidden, s.head_dim
    norm = t.norm
    own = tokens if shard is None else shard
    calls = [_rows("norm", norm, own, h),
             _gemm("qkv", (s.q_heads + 2 * s.kv_heads) * d, h, tokens, dt, columns, rows=rows),
             *rope_and_cache, *attention,
             _gemm("attn.out", h, s.q_heads * d, tokens, dt, columns, rows=rows),
             flat("residual", "residual_add", own * h, ACT, 1),
             _rows("norm", norm, own, h)]
    if t.gated_ffn:
        calls += [_gemm("ffn.up", 2 * s.ffn, h, tokens, dt, columns),
                  _rows("ffn.act", "swiglu", tokens, s.ffn)]
    else:
        calls.append(_gemm(f"ffn.up+{t.act}", s.ffn, h, tokens, dt, columns,
                           kernel="gemm_bias_gelu"))
    calls += [_gemm("ffn.down", h, s.ffn, tokens, dt, columns),
              flat("residual", "residual_add", own * h, ACT, 1)]
    return calls


def _rope(t: Transformer, s: Split, tokens: int) -> list[Call]:
    if t.positions != "rope":
        return []
    return [_call("rope", "rope", "other", ACT, T=tokens, H=s.q_heads + s.kv_heads,
                  D=s.head_dim)]


def _kv_append(s: Split, sequences: int, cache: int) -> Call:
    """The KV-cache write of one token of each of ``sequences`` into caches of ``cache``."""
    return _call("kv.append", "kv_append", "other", ACT, B=sequences, KVH=s.kv_heads,
                 D=s.head_dim, S=cache)


def _ends(t: Transformer, s: Split, tokens: int, last: int, dt: str, columns: int
          ) -> list[Call]:
    """Embedding (and positions) of ``tokens`` before the layers; final norm, head and
    sampling of the ``last`` tokens after."""
    h = t.hidden
    calls = [flat("embedding", "residual_add", tokens * h, ACT, 1)]
    if t.positions == "learned":
        calls.append(flat("positions", "residual_add", tokens * h, ACT, 1))
    calls.append(_rows("final.norm", t.norm, last, h))
    if t.causal and t.vocab:
        calls += [_gemm("lm_head", s.vocab, h, last, dt, columns),
                  _call("sample", "sample", "other", ACT, B=last, V=s.vocab, K=1)]
    elif not t.causal:
        calls.append(_gemm("pooler", h, h, last, dt, columns))
    return calls


def _attention(t: Transformer, s: Split, length: int, n: int, rows: bool) -> Call:
    """Attention over ``n`` prompts of ``length`` tokens: with ``rows`` on the tokens' rows
    (attention_rows), else head after head, the keys streamed."""
    causal = "_causal" if t.causal else ""
    if rows:
        return _call("attention", f"attention_rows{causal}", "attention", ACT, H=s.q_heads,
                     B=n, S=length, D=s.head_dim)
    return _call("attention", f"attention{causal}", "attention", ACT, B=n * s.q_heads,
                 S=length, D=s.head_dim)


def prefill(t: Transformer, s: Split, lengths: tuple[int, ...], columns: int,
            dtype: str = "bf16", sequence_parallel: bool = False) -> dict[str, list[Call]]:
    """Kernel calls of the prefill of prompts of ``lengths`` tokens, on a core whose PSUM
    bank holds ``columns`` fp32 (:func:`kernels.builder.psum_columns`: the GEMM's widest
    moving tile and the attention's key block): ``layer`` (one layer, run ``t.layers``
    times) and ``once`` (embedding, final norm, head, sampling). With
    ``sequence_parallel`` the norms, residual adds and embedding work on the rank's
    ``ceil(tokens / tp)`` tokens."""
    dt = GEMM_DTYPES[dtype]
    tokens = sum(lengths)
    # tokens' rows where every prompt's keys fit one block
    rows = max(lengths) <= columns
    attention = [_attention(t, s, length, n, rows)
                 for length, n in sorted(Counter(lengths).items())]
    # each prompt's keys and values written as one block into its cache
    cache = ([_call("kv.prefill", "kv_prefill", "other", ACT, B=n, KVH=s.kv_heads,
                    D=s.head_dim, S=length) for length, n in sorted(Counter(lengths).items())]
             if t.causal else [])
    shard = math.ceil(tokens / s.tp) if sequence_parallel else None
    layer = _layer(t, s, tokens, dt, attention, _rope(t, s, tokens) + cache, columns, rows,
                   shard)
    return {"layer": layer,
            "once": _ends(t, s, tokens if shard is None else shard, len(lengths), dt,
                          columns)}


def decode(t: Transformer, s: Split, batch: int, context: int, columns: int,
           dtype: str = "bf16") -> dict[str, list[Call]]:
    """Kernel calls of one decode step of ``batch`` sequences whose caches hold ``context``
    keys (the new token's included): ``layer`` and ``once`` as :func:`prefill`'s."""
    dt = GEMM_DTYPES[dtype]
    attention = [_call("decode.attention", "decode_attention", "attention", ACT, B=batch,
                       H=s.q_heads, KVH=s.kv_heads, S=context, D=s.head_dim)]
    cache = [_kv_append(s, batch, context)]
    layer = _layer(t, s, batch, dt, attention, _rope(t, s, batch) + cache, columns)
    return {"layer": layer, "once": _ends(t, s, batch, batch, dt, columns)}
