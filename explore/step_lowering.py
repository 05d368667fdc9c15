"""A transformer training step lowered to core kernels.

**Lowering** (:func:`lower`). One micro-batch of ``micro_batch`` sequences on one rank (a
logical NeuronCore) of a tensor-parallel group of ``tp`` becomes calls of the kernels in
:mod:`kernels`, forward and backward, each with its shape and how many times it runs:

- per layer forward: norm, QKV GEMM, flash attention (one kernel over the micro-batch's
  local heads; the causal kernel for a causal workload, which skips the key blocks after
  each query tile and masks the diagonal ones), output GEMM, residual add, norm, FFN up GEMM
  (fused with GELU for a plain FFN; a SwiGLU kernel after it for a gated one), FFN down GEMM,
  residual add. Norms and residual adds see ``T / tp`` tokens with sequence parallelism,
  ``T`` without.
- per layer backward: each GEMM's input-gradient and weight-gradient GEMMs (``M = K, K = M``
  and ``M = K, K = T, N = M``); attention's backward as: the forward attention kernel again
  with selective or full recomputation (it recomputes the probabilities, as a flash backward
  and Megatron-LM's selective recomputation do; without recomputation they are saved from
  the forward instead), the four GEMMs of
  ``dV, dP, dQ, dK`` with the heads stacked along ``M`` and the element-wise ``dS`` over the
  score matrices (a residual-add kernel of that size), both scaled by the fraction of
  (query tile, key block) pairs a causal mask keeps; each norm's input and weight gradients
  by the RMSNorm or LayerNorm backward kernel; the SwiGLU activation's by its backward
  kernel, the plain FFN's GELU by its own; the residual adds' gradients (the sum of the
  two branches' gradients, a residual-add kernel); full recomputation re-runs the whole
  forward; and, when a step has several micro-batches, the layer's weight gradients added
  to their fp32 accumulators.
- the first stage adds the embedding (a row copy of its size, standing in for a gather, and
  the same for its scatter-add backward: the instruction set has no indirect DMA yet) and its
  output's reduction over the vocabulary-parallel ranks; the last stage the final norm, the LM
  head GEMM with its backward, and the vocabulary-parallel loss: row max, all-reduce (max),
  ``exp`` with its row sum and the target's logit, all-reduce (sum), loss and gradient.
- per step: Adam over the rank's parameters (its ``1 / dp`` share with ZeRO-1).

Kernel times are :class:`~explore.kerneltimes.KernelTimes`: the core simulator's timing-only
runs, cached. A logical core of ``lnc`` physical cores divides each kernel's split key
(:attr:`kernels.Kernel.split`) among them, as ``gen run --lnc`` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial

from kernels.attention import key_block, query_tile
from kernels.builder import psum_columns

from .workloads import DTYPES, Transformer, transformer_params

__all__ = ["RECOMPUTE", "Call", "Layout", "activation_bytes", "causal_fraction", "flat",
           "lower"]

RECOMPUTE = ("none", "selective", "full")
#: Free size of the row-wise kernels when a row has no meaning of its own (element-wise work,
#: a loss row longer than one SBUF tile): elements are laid out ``R x 2048``.
_ROW = 2048
_WIDE = 4096


@dataclass(frozen=True)
class Call:
    """``count`` runs of ``kernel`` at ``shape`` in ``dtype``; ``part`` is gemm or other."""

    what: str
    kernel: str
    shape: tuple[tuple[str, int], ...]
    dtype: str
    count: float
    part: str
    #: bytes of activations this forward call leaves for the backward pass (per run)
    saved: float = 0.0


@dataclass(frozen=True)
class Layout:
    """How a step is split: degrees, micro-batch, recomputation and the options."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    micro_batch: int = 1
    recompute: str = "none"
    sequence_parallel: bool = True
    zero1: bool = True
    gemm_only: bool = False


def _gemm(what, m, k, n, dtype, count, saved=0.0, *, columns):
    """``out[m, n]``; one of fewer columns than a moving tile takes (``columns``, a PSUM bank
    of fp32) and at least as many rows is timed as its transpose (``out.T = rhs.T @ lhsT``,
    the same arithmetic), whose rows are the longer."""
    if n < columns <= m:
        m, n = n, m
    return Call(what, "gemm", (("M", int(m)), ("K", int(k)), ("N", int(n))), dtype, count,
                "gemm", saved)


def _rows(what, kernel, r, c, dtype, count, saved=0.0):
    return Call(what, kernel, (("R", int(r)), ("C", int(c))), dtype, count, "other", saved)


def _wide(what, kernel, r, c, dtype, count, saved=0.0):
    """A row-wise kernel whose rows may be longer than its SBUF tiles allow: a row of ``c``
    is timed as ``ceil(c / 4096)`` pieces (the same data movement; combining the pieces'
    statistics, a few instructions per row, is left out)."""
    pieces = math.ceil(c / _WIDE)
    return _rows(what, kernel, r * pieces, math.ceil(c / pieces), dtype, count, saved)


def flat(what, kernel, elements, dtype, count):
    """An element-wise kernel over ``elements`` elements, laid out ``R x 2048``."""
    return _rows(what, kernel, max(1, math.ceil(elements / _ROW)), min(_ROW, elements), dtype,
                 count)


def causal_fraction(seq: int, tile: int, block: int) -> float:
    """Fraction of (query tile, key block) pairs of the flash kernel, queries in tiles of
    ``tile`` and keys in blocks of ``block``, that a causal mask keeps."""
    blocks = math.ceil(seq / block)
    kept = sum(min(blocks, math.ceil(min(q0 + tile, seq) / block))
               for q0 in range(0, seq, tile))
    return kept / (math.ceil(seq / tile) * blocks)


def lower(t: Transformer, layout: Layout, params) -> dict[str, list[Call]]:
    """The kernel calls of one micro-batch on one rank of a chip whose cores are ``params``
    (:class:`~hdl.core.params.CoreParams`): ``forward`` and ``backward`` (one layer),
    ``first`` (embedding, first stage), ``last`` (head and loss, last stage) and ``step``
    (the optimizer, once per step)."""
    tp, dt = layout.tp, t.dtype
    gemm = partial(_gemm, columns=psum_columns(params))
    es = DTYPES[dt]
    seq, mb = t.seq, layout.micro_batch
    tokens = mb * seq
    local = math.ceil(tokens / tp) if layout.sequence_parallel else tokens
    h, hd = t.hidden, t.hidden // t.heads
    kv = (t.kv_heads or t.heads) * hd
    heads = math.ceil(t.heads / tp)
    ffn = math.ceil(t.ffn / tp)
    norm = "rmsnorm" if t.norm == "rmsnorm" else "layernorm"
    frac = causal_fraction(seq, query_tile(params), key_block(params)) if t.causal else 1.0
    nb = mb * heads  # heads of the micro-batch's sequences, one attention kernel for all
    attention = "attention_causal" if t.causal else "attention"

    fwd = [
        _wide("norm", norm, local, h, dt, 1, local * h * es),
        gemm("qkv", math.ceil((h + 2 * kv) / tp), h, tokens, dt, 1, tokens * h * es),
        # saved: q, k, v and the output; without recomputation the probabilities too
        Call("attention", attention, (("B", nb), ("S", seq), ("D", hd)), dt, 1, "other",
             (3 * seq * hd + seq * hd + (seq * seq * frac if layout.recompute == "none"
                                         else 0)) * es * nb),
        gemm("attn.out", h, math.ceil(h / tp), tokens, dt, 1, tokens * h * es / tp),
        flat("residual", "residual_add", local * h, dt, 1),
        _wide("norm", norm, local, h, dt, 1, local * h * es),
    ]
    if t.gated_ffn:
        fwd += [gemm("ffn.up", 2 * ffn, h, tokens, dt, 1, tokens * h * es),
                flat("ffn.act", "swiglu", tokens * ffn, dt, 1)]
        fwd[-1] = replace(fwd[-1], saved=2 * tokens * ffn * es)
    else:
        fwd.append(Call("ffn.up", "gemm_bias_gelu", (("M", ffn), ("K", h), ("N", tokens)), dt,
                        1, "gemm", 2 * tokens * h * es))
    fwd += [gemm("ffn.down", h, ffn, tokens, dt, 1, tokens * ffn * es),
            flat("residual", "residual_add", local * h, dt, 1)]

    bwd = []
    for c in fwd:
        if c.part == "gemm":
            s = dict(c.shape)
            m, k, n = s["M"], s["K"], s["N"]
            bwd += [gemm(c.what + ".dgrad", k, m, n, dt, c.count),
                    gemm(c.what + ".wgrad", k, n, m, dt, c.count)]
            if c.kernel == "gemm_bias_gelu":
                bwd.append(flat("ffn.act.grad", "gelu_backward", n * m, dt, c.count))
        elif c.kernel == attention:
            if layout.recompute != "none":
                bwd.append(replace(c, what="attention.recompute", saved=0.0))
            bwd += [gemm("attention.dv", nb * seq, seq, hd, dt, frac),
                    gemm("attention.dp", nb * seq, hd, seq, dt, frac),
                    gemm("attention.dq", nb * seq, seq, hd, dt, frac),
                    gemm("attention.dk", nb * seq, seq, hd, dt, frac),
                    flat("attention.ds", "residual_add", nb * seq * seq, dt, frac)]
        elif c.kernel == "swiglu":
            bwd.append(replace(c, what=c.what + ".grad", kernel="swiglu_backward", saved=0.0))
        elif c.kernel in ("rmsnorm", "layernorm"):
            bwd.append(replace(c, what=c.what + ".grad", kernel=c.kernel + "_backward",
                               saved=0.0))
        else:
            bwd.append(replace(c, what=c.what + ".grad", saved=0.0))
    if layout.recompute == "full":
        bwd += [replace(c, what=c.what + ".recompute", saved=0.0) for c in fwd]

    # gradient accumulation: each micro-batch's weight gradients added to the fp32
    # accumulator (counted by the schedule only when a step has several micro-batches)
    weights = (h * (h + 2 * kv) + h * h) / tp + (3 if t.gated_ffn else 2) * h * ffn + 2 * h
    bwd.append(replace(flat("grad.accumulate", "grad_accumulate", math.ceil(weights), dt, 1),
                       part="accumulate"))

    vocab = math.ceil(t.vocab / tp) if t.vocab else 0
    first, last = [], []
    if t.vocab:
        table = replace(flat("embedding.grad.accumulate", "grad_accumulate", vocab * h, dt, 1),
                        part="accumulate")
        first = [flat("embedding", "residual_add", local * h, dt, 1),
                 flat("embedding.grad", "residual_add", local * h, dt, 1)]
        if not t.tied_embeddings:
            first.append(table)
        head = gemm("lm_head", vocab, h, tokens, dt, 1)
        # the vocabulary-parallel loss: row max (all-reduced), exp and its sum with the
        # target's logit (all-reduced), then loss and gradient
        last = [_wide("final.norm", norm, local, h, dt, 1),
                _wide("final.norm.grad", norm + "_backward", local, h, dt, 1),
                head, gemm("lm_head.dgrad", h, vocab, tokens, dt, 1),
                gemm("lm_head.wgrad", h, tokens, vocab, dt, 1),
                _wide("loss.max", "logits_max", tokens, vocab, dt, 1),
                _wide("loss.exp", "cross_entropy", tokens, vocab, dt, 1),
                _wide("loss.grad", "cross_entropy_backward", tokens, vocab, dt, 1),
                replace(table, what="lm_head.grad.accumulate")]
    stages = layout.pp
    params = transformer_params(t) / (tp * stages)
    shard = params / (layout.dp if layout.zero1 else 1)
    step = [flat("optimizer", "adam", math.ceil(shard), "fp32", 1)]
    step = [replace(c, part="optimizer") for c in step]
    out = {"forward": fwd, "backward": bwd, "first": first, "last": last, "step": step}
    if layout.gemm_only:
        out = {k: [c for c in v if c.part == "gemm"] for k, v in out.items()}
    return out


def activation_bytes(t: Transformer, layout: Layout, calls: dict[str, list[Call]]) -> float:
    """Activation bytes one layer leaves for its backward pass per micro-batch: the saved
    tensors of its forward kernels, or only its input with full recomputation. A rank holds
    this for each of its layers and ``min(pp, micro-batches)`` micro-batches in flight
    (1F1B's peak, on the first stage)."""
    if layout.recompute == "full":
        tokens = layout.micro_batch * t.seq
        return (tokens / layout.tp if layout.sequence_parallel else tokens) * t.hidden \
            * DTYPES[t.dtype]
    return sum(c.saved * c.count for c in calls["forward"])
