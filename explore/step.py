"""A transformer training step lowered to core kernels and scheduled over a cluster.

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
runs, cached. A logical core of ``lnc`` physical cores divides each kernel's first shape key
among them, as ``gen run --lnc`` does.

**Schedule** (:func:`evaluate`). Per micro-batch, the busiest pipeline stage runs its
kernels and its tensor-parallel collectives (two all-reduces per layer forward and two
backward, or with sequence parallelism two all-gathers and two reduce-scatters each way; full
recomputation repeats the forward ones; on the end stages the vocabulary-parallel
embedding's reduction and the loss's all-reduces of its row max and of its sum and target
logit); they sit on the critical path. 1F1B over ``m``
micro-batches and ``pp`` stages: ``m`` micro-batch times plus a bubble of ``pp - 1`` of them,
and a point-to-point send of the boundary activations each way per micro-batch and per
bubble slot, over NeuronLink inside a node and EFA between nodes. The data-parallel gradient
reduction (a reduce-scatter with ZeRO-1, an all-reduce without) overlaps the last
micro-batch's backward when the workload says so; ZeRO-1's parameter all-gather follows the
optimizer step and is exposed. Collective times are :func:`explore.model.group_allreduce`
(:mod:`sim.system.collectives`' alpha-beta rings over the instance topology, the server and
EFA); an all-gather or a reduce-scatter is half an all-reduce of the same bytes.

Memory per rank: bf16 weights, the gradients (in fp32 accumulators when a step has several
micro-batches), the optimizer state (its ``1 / dp`` share with ZeRO-1) and the activations.

Step time = GEMM + other kernels + exposed communication + bubble + optimizer, each part
reported, so the breakdown adds up to the step time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from kernels.attention import KEY_BLOCK
from sim.system import collectives, formulas

from . import model
from .kerneltimes import KernelTimes
from .workloads import DTYPES, Transformer, compile_transformer, transformer_params

__all__ = ["KERNEL_PARAMS", "PARTS", "RECOMPUTE", "SWEEP_METRICS", "Call", "Layout",
           "StepError", "core_variant", "evaluate", "evaluate_sweep", "from_cli",
           "load_workload", "lower"]

RECOMPUTE = ("none", "selective", "full")
#: The parts of the step time, in the order they are reported and stacked.
PARTS = ("gemm", "other", "communication", "bubble", "optimizer")
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


def _gemm(what, m, k, n, dtype, count, saved=0.0):
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


def _flat(what, kernel, elements, dtype, count):
    """An element-wise kernel over ``elements`` elements, laid out ``R x 2048``."""
    return _rows(what, kernel, max(1, math.ceil(elements / _ROW)), min(_ROW, elements), dtype,
                 count)


def causal_fraction(seq: int, query_tile: int) -> float:
    """Fraction of (query tile, key block) pairs of the flash kernel a causal mask keeps."""
    kb = KEY_BLOCK
    blocks = math.ceil(seq / kb)
    kept = sum(min(blocks, math.ceil(min(q0 + query_tile, seq) / kb))
               for q0 in range(0, seq, query_tile))
    return kept / (math.ceil(seq / query_tile) * blocks)


def lower(t: Transformer, layout: Layout, query_tile: int = 128) -> dict[str, list[Call]]:
    """The kernel calls of one micro-batch on one rank: ``forward`` and ``backward`` (one
    layer), ``first`` (embedding, first stage), ``last`` (head and loss, last stage) and
    ``step`` (the optimizer, once per step)."""
    tp, dt = layout.tp, t.dtype
    es = DTYPES[dt]
    seq, mb = t.seq, layout.micro_batch
    tokens = mb * seq
    local = math.ceil(tokens / tp) if layout.sequence_parallel else tokens
    h, hd = t.hidden, t.hidden // t.heads
    kv = (t.kv_heads or t.heads) * hd
    heads = math.ceil(t.heads / tp)
    ffn = math.ceil(t.ffn / tp)
    norm = "rmsnorm" if t.norm == "rmsnorm" else "layernorm"
    frac = causal_fraction(seq, query_tile) if t.causal else 1.0
    nb = mb * heads  # heads of the micro-batch's sequences, one attention kernel for all
    attention = "attention_causal" if t.causal else "attention"

    fwd = [
        _wide("norm", norm, local, h, dt, 1, local * h * es),
        _gemm("qkv", math.ceil((h + 2 * kv) / tp), h, tokens, dt, 1, tokens * h * es),
        # saved: q, k, v and the output; without recomputation the probabilities too
        Call("attention", attention, (("B", nb), ("S", seq), ("D", hd)), dt, 1, "other",
             (3 * seq * hd + seq * hd + (seq * seq * frac if layout.recompute == "none"
                                         else 0)) * es * nb),
        _gemm("attn.out", h, math.ceil(h / tp), tokens, dt, 1, tokens * h * es / tp),
        _flat("residual", "residual_add", local * h, dt, 1),
        _wide("norm", norm, local, h, dt, 1, local * h * es),
    ]
    if t.gated_ffn:
        fwd += [_gemm("ffn.up", 2 * ffn, h, tokens, dt, 1, tokens * h * es),
                _flat("ffn.act", "swiglu", tokens * ffn, dt, 1)]
        fwd[-1] = replace(fwd[-1], saved=2 * tokens * ffn * es)
    else:
        fwd.append(Call("ffn.up", "gemm_bias_gelu", (("M", ffn), ("K", h), ("N", tokens)), dt,
                        1, "gemm", 2 * tokens * h * es))
    fwd += [_gemm("ffn.down", h, ffn, tokens, dt, 1, tokens * ffn * es),
            _flat("residual", "residual_add", local * h, dt, 1)]

    bwd = []
    for c in fwd:
        if c.part == "gemm":
            s = dict(c.shape)
            m, k, n = s["M"], s["K"], s["N"]
            bwd += [_gemm(c.what + ".dgrad", k, m, n, dt, c.count),
                    _gemm(c.what + ".wgrad", k, n, m, dt, c.count)]
            if c.kernel == "gemm_bias_gelu":
                bwd.append(_flat("ffn.act.grad", "gelu_backward", n * m, dt, c.count))
        elif c.kernel == attention:
            if layout.recompute != "none":
                bwd.append(replace(c, what="attention.recompute", saved=0.0))
            bwd += [_gemm("attention.dv", nb * seq, seq, hd, dt, frac),
                    _gemm("attention.dp", nb * seq, hd, seq, dt, frac),
                    _gemm("attention.dq", nb * seq, seq, hd, dt, frac),
                    _gemm("attention.dk", nb * seq, seq, hd, dt, frac),
                    _flat("attention.ds", "residual_add", nb * seq * seq, dt, frac)]
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
    bwd.append(replace(_flat("grad.accumulate", "grad_accumulate", math.ceil(weights), dt, 1),
                       part="accumulate"))

    vocab = math.ceil(t.vocab / tp) if t.vocab else 0
    first, last = [], []
    if t.vocab:
        table = replace(_flat("embedding.grad.accumulate", "grad_accumulate", vocab * h, dt, 1),
                        part="accumulate")
        first = [_flat("embedding", "residual_add", local * h, dt, 1),
                 _flat("embedding.grad", "residual_add", local * h, dt, 1)]
        if not t.tied_embeddings:
            first.append(table)
        head = _gemm("lm_head", vocab, h, tokens, dt, 1)
        # the vocabulary-parallel loss: row max (all-reduced), exp and its sum with the
        # target's logit (all-reduced), then loss and gradient
        last = [_wide("final.norm", norm, local, h, dt, 1),
                _wide("final.norm.grad", norm + "_backward", local, h, dt, 1),
                head, _gemm("lm_head.dgrad", h, vocab, tokens, dt, 1),
                _gemm("lm_head.wgrad", h, tokens, vocab, dt, 1),
                _wide("loss.max", "logits_max", tokens, vocab, dt, 1),
                _wide("loss.exp", "cross_entropy", tokens, vocab, dt, 1),
                _wide("loss.grad", "cross_entropy_backward", tokens, vocab, dt, 1),
                replace(table, what="lm_head.grad.accumulate")]
    stages = layout.pp
    params = transformer_params(t) / (tp * stages)
    shard = params / (layout.dp if layout.zero1 else 1)
    step = [_flat("optimizer", "adam", math.ceil(shard), "fp32", 1)]
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


@dataclass(frozen=True)
class StepResult:
    """One design point's step: times in seconds, rates per second, bytes."""

    layout: Layout
    nodes: int
    ranks: int
    micro_batches: float
    step_time: float
    parts: dict[str, float]
    sequences_per_second: float
    tokens_per_second: float
    mfu: float
    memory: dict[str, float]
    hbm_per_rank: float
    fits: bool
    kernel_calls: int
    calls: dict[str, list[Call]]


def _time(calls: list[Call], times: KernelTimes, lnc: int) -> dict[str, float]:
    out = {"gemm": 0.0, "other": 0.0, "optimizer": 0.0, "accumulate": 0.0}
    for c in calls:
        shape = dict(c.shape)
        first = next(iter(shape))
        shape[first] = math.ceil(shape[first] / lnc)
        out[c.part] += times(c.kernel, shape, c.dtype) * c.count
    return out


#: System parameters a sweep of :func:`evaluate_many` may vary per point (SI units): they
#: change collectives and memory, not a kernel's time.
SYSTEM_PARAMS = ("link_bandwidth", "hbm_capacity", "efa_bandwidth")
#: Metrics of :func:`evaluate_many`: name -> (unit, description).
METRICS = {
    "valid": ("", "the split divides the ranks, the heads and the batch"),
    "data_parallel": ("", "data-parallel degree"),
    "micro_batches": ("", "micro-batches per step (gradient accumulation)"),
    "step_time": ("s", "time of one training step"),
    **{f"{p}_time": ("s", f"{p} part of the step time") for p in PARTS},
    "sequences_per_second": ("1/s", "sequences per second"),
    "tokens_per_second": ("tokens/s", "tokens per second"),
    "mfu": ("", "model FLOPs over peak FLOPs x step time"),
    "memory_bytes": ("B", "weights, gradients, optimizer state and activations per rank"),
    "fits": ("", "the memory per rank fits the rank's share of HBM"),
}


def _combo(t, times, lnc, tp, pp, mb, recompute, dp, sp, zero1, gemm_only):
    """Kernel-time sums of one split: forward and backward of a layer, the busiest end
    stage, the optimizer (of ``dp``), and a layer's activation bytes; and the calls."""
    layout = Layout(tp=tp, pp=pp, dp=dp, micro_batch=mb, recompute=recompute,
                    sequence_parallel=sp, zero1=zero1, gemm_only=gemm_only)
    calls = lower(t, layout)
    fwd, bwd = _time(calls["forward"], times, lnc), _time(calls["backward"], times, lnc)
    first, last = _time(calls["first"], times, lnc), _time(calls["last"], times, lnc)
    ends = [first, last] if pp > 1 else [{k: first[k] + last[k] for k in first}]
    end = max(ends, key=lambda d: d["gemm"] + d["other"])
    opt = _time(calls["step"], times, lnc)["optimizer"]
    row = (fwd["gemm"] + bwd["gemm"], fwd["other"] + bwd["other"],
           bwd["gemm"] + bwd["other"], end["gemm"], end["other"], opt,
           activation_bytes(t, layout, calls), bwd["accumulate"], end["accumulate"])
    return row, calls


def _optimizer(t, times, lnc, shard: int) -> float:
    return _time([replace(_flat("optimizer", "adam", shard, "fp32", 1), part="optimizer")],
                 times, lnc)["optimizer"]


def evaluate_many(t: Transformer, base: model.Base, times: KernelTimes, *, tp, pp,
                  micro_batch, nodes, recompute, sequence_parallel: bool = True,
                  zero1: bool = True, gemm_only: bool = False, values: dict | None = None,
                  _calls: dict | None = None) -> dict[str, np.ndarray]:
    """:data:`METRICS` of many design points at once (arrays of equal length, or scalars;
    ``recompute`` as names or indices of :data:`RECOMPUTE`). Kernel times are summed once per
    distinct split; everything else is numpy over the points. ``values`` may vary what does
    not change a kernel's time: :data:`SYSTEM_PARAMS`, arrays in SI units."""
    tp, pp, mb, nodes = (np.atleast_1d(np.asarray(x, dtype=np.int64))
                         for x in (tp, pp, micro_batch, nodes))
    rc = np.atleast_1d(np.asarray(recompute))
    if rc.dtype.kind in "iu":
        rc = np.asarray(RECOMPUTE)[rc]
    size = max(len(tp), len(pp), len(mb), len(nodes), len(rc),
               *(np.size(x) for x in (values or {}).values()))
    tp, pp, mb, nodes = (np.broadcast_to(x, (size,)) for x in (tp, pp, mb, nodes))
    names, where = np.unique(rc.astype(str), return_inverse=True)
    unknown = sorted(set(names) - set(RECOMPUTE))
    if unknown:
        raise StepError(f"expected recompute one of {', '.join(RECOMPUTE)}, found {unknown[0]!r}")
    rc_code = np.broadcast_to(np.array([RECOMPUTE.index(x) for x in names])[where.reshape(-1)],
                              (size,))
    lnc = int(base.values["lnc"])
    per_chip = base.values["cores"] / lnc
    per_node = int(per_chip * base.values["chips"] * base.instances)
    ranks = per_node * nodes
    kv = t.kv_heads or t.heads
    valid = (ranks % (tp * pp) == 0) & (t.heads % tp == 0) & ((kv % tp == 0) | (tp % kv == 0)) \
        & (pp <= t.layers)
    dp = np.where(valid, ranks // (tp * pp), 0)
    valid &= (dp > 0) & (t.batch % np.maximum(dp * mb, 1) == 0)
    dp = np.where(valid, dp, 0)
    micro = np.where(valid, t.batch / np.maximum(dp * mb, 1), np.nan)

    # kernel sums once per distinct (tp, pp, micro-batch, recompute) of the valid points
    key = ((tp * (pp.max() + 1) + pp) * (mb.max() + 1) + mb) * len(RECOMPUTE) + rc_code
    key = np.where(valid, key, -1)
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rows = np.zeros((len(uniq), 9))
    for i, j in enumerate(first):
        if uniq[i] < 0:
            continue
        rows[i], calls = _combo(t, times, lnc, int(tp[j]), int(pp[j]), int(mb[j]),
                                RECOMPUTE[rc_code[j]], int(dp[j]), sequence_parallel, zero1,
                                gemm_only)
        if _calls is not None:
            _calls.update(calls)
    layer_gemm, layer_other, layer_bwd, end_g, end_o, opt, act, layer_acc, end_acc = \
        rows[inverse.reshape(-1)].T
    total = transformer_params(t)
    if zero1 and not gemm_only:
        # the optimizer's shard depends on dp as well: once per distinct shard
        shard = np.where(valid, np.ceil(total / (tp * pp) / np.maximum(dp, 1)), 0)
        shards, where = np.unique(shard.astype(np.int64), return_inverse=True)
        opt = np.array([_optimizer(t, times, lnc, int(x)) if x else 0.0
                        for x in shards])[where.reshape(-1)]
    layers = np.ceil(t.layers / pp)
    act = act * layers * np.minimum(pp, np.nan_to_num(micro))
    gemm = layers * layer_gemm + end_g
    # gradient accumulation runs per micro-batch only when there are several
    other = layers * layer_other + end_o \
        + np.where(np.nan_to_num(micro) > 1, layers * layer_acc + end_acc, 0.0)

    values = dict(values or {})
    unknown = sorted(set(values) - set(SYSTEM_PARAMS))
    if unknown:
        raise StepError(f"expected system parameters among {', '.join(SYSTEM_PARAMS)}, "
                        f"found {unknown[0]!r}")
    v = {k: np.full(size, float(x)) for k, x in base.values.items()}
    for k in ("link_bandwidth", "hbm_capacity"):
        if k in values:
            v[k] = np.broadcast_to(np.asarray(values[k], float), (size,))
    if "efa_bandwidth" in values:
        base = replace(base, efa_bandwidth=np.broadcast_to(
            np.asarray(values["efa_bandwidth"], float), (size,)))
    dims_long = model.longest_dims(v["chips"], base) if base.topology == "torus" else None
    es = DTYPES[t.dtype]
    tokens = mb * t.seq

    def allreduce(nbytes, group, stride):
        group = np.maximum(group, 1).astype(float)
        out = model.group_allreduce(np.broadcast_to(np.asarray(nbytes, float), (size,)),
                                    group, per_chip, np.asarray(stride, float), v, base,
                                    dims_long)
        return np.where(group > 1, out, 0.0)

    per_layer = np.where(rc_code == RECOMPUTE.index("full"), 6, 4)
    tp_comm = layers * per_layer * allreduce(tokens * t.hidden * es, tp, np.ones(size))
    if t.vocab and not gemm_only:
        # the vocabulary-parallel embedding's output reduced over TP (and its gradient
        # gathered), and the loss's all-reduces of the row max and of (sum, target logit)
        tp_comm = tp_comm + allreduce(tokens * t.hidden * es, tp, np.ones(size)) \
            + allreduce(tokens * 4.0, tp, np.ones(size)) \
            + allreduce(tokens * 8.0, tp, np.ones(size))
    nbytes = tokens * t.hidden * es / (tp if sequence_parallel else 1)
    stride = tp * dp
    link = v["link_bandwidth"] * base.link_efficiency / base.links
    over_efa = stride >= per_node
    bw = np.where(over_efa, base.efa_bandwidth / per_node, link)
    alpha = np.where(over_efa, base.efa_alpha, base.link_alpha)
    p2p = np.where(pp > 1, 2 * collectives.send_time(nbytes, bw, alpha), 0.0)
    micro_time = gemm + other + tp_comm + p2p
    bubble = (pp - 1) * micro_time

    params = total / (tp * pp)
    grad_bytes = params * t.grad_bytes
    if zero1:
        dp_reduce = 0.5 * allreduce(grad_bytes, dp, tp)
        dp_gather = 0.5 * allreduce(params * t.weight_bytes, dp, tp)
    else:
        dp_reduce, dp_gather = allreduce(grad_bytes, dp, tp), np.zeros(size)
    exposed = np.maximum(dp_reduce - layers * layer_bwd, 0.0) if t.overlap_gradients \
        else dp_reduce
    comm = micro * (tp_comm + p2p) + exposed + dp_gather
    parts = {"gemm": micro * gemm, "other": micro * other, "communication": comm,
             "bubble": bubble, "optimizer": opt}
    step_time = sum(parts.values())
    step_time = np.where(valid, step_time, np.nan)

    flops = compile_transformer(t, 1).flops()
    chips = base.values["chips"] * base.instances * nodes
    peak = formulas.peak_flops(base.values["rows"], base.values["cols"],
                               base.values["clock"], base.rate(t.dtype),
                               base.values["cores"]) * chips
    hbm = v["hbm_capacity"] / per_chip
    # with several micro-batches the gradients live in their fp32 accumulators
    held = np.where(np.nan_to_num(micro) > 1, params * DTYPES["fp32"], grad_bytes)
    memory = {"weights": params * t.weight_bytes, "gradients": held,
              "optimizer": params * t.optimizer_bytes / np.where(zero1, np.maximum(dp, 1), 1),
              "activations": act}
    mem_total = sum(memory.values())
    out = {"valid": valid, "data_parallel": dp, "micro_batches": micro,
           "step_time": step_time, **{f"{p}_time": parts[p] for p in PARTS},
           "sequences_per_second": t.batch / step_time,
           "tokens_per_second": t.batch * t.seq / step_time, "mfu": flops / (peak * step_time),
           "memory_bytes": mem_total, "fits": valid & (mem_total <= hbm),
           "hbm_per_rank": hbm}
    out.update({f"memory_{k}": np.broadcast_to(x, (size,)) for k, x in memory.items()})
    return out


def evaluate(t: Transformer, base: model.Base, times: KernelTimes, layout: Layout,
             nodes: int) -> StepResult:
    """The training step of ``t`` on ``nodes`` nodes of ``base`` split as ``layout``
    (:func:`evaluate_many` for one point, with the kernel calls)."""
    calls: dict = {}
    m = evaluate_many(t, base, times, tp=layout.tp, pp=layout.pp,
                      micro_batch=layout.micro_batch, nodes=nodes, recompute=layout.recompute,
                      sequence_parallel=layout.sequence_parallel, zero1=layout.zero1,
                      gemm_only=layout.gemm_only, _calls=calls)
    dp = int(m["data_parallel"][0])
    lnc = int(base.values["lnc"])
    ranks = int(base.values["cores"] / lnc * base.values["chips"] * base.instances) * nodes
    memory = {k: float(m[f"memory_{k}"][0])
              for k in ("weights", "gradients", "optimizer", "activations")}
    c = calls
    return StepResult(
        layout=replace(layout, dp=dp), nodes=nodes, ranks=ranks,
        micro_batches=float(m["micro_batches"][0]), step_time=float(m["step_time"][0]),
        parts={p: float(m[f"{p}_time"][0]) for p in PARTS},
        sequences_per_second=float(m["sequences_per_second"][0]),
        tokens_per_second=float(m["tokens_per_second"][0]), mfu=float(m["mfu"][0]),
        memory=memory, hbm_per_rank=float(m["hbm_per_rank"][0]), fits=bool(m["fits"][0]),
        kernel_calls=sum(len(x) for x in c.values()), calls=c)


#: Parameters of a sweep (:data:`explore.model.PARAMS`) that change a kernel's time: a design
#: point that varies one of them gets its own core, and its kernels are simulated for it.
KERNEL_PARAMS = ("rows", "cols", "clock", "sbuf", "hbm_bandwidth", "cores")
#: The lowered step's figures as sweep metrics of ``gen explore`` (the prefix keeps them apart
#: from the analytic model's): name -> (unit, description).
SWEEP_METRICS = {f"lowered_{k}": (u, f"lowered step: {d}") for k, (u, d) in METRICS.items()}


@lru_cache(maxsize=8)
def _base_core(spec_file: str):
    """(core parameters, DMA engines, bandwidth of one engine) of a spec's chip, or None when
    the chip spec lacks what the core simulator needs."""
    from hdl.params import ModelError, core_params  # noqa: PLC0415
    from specs import loader  # noqa: PLC0415

    chip, _ = model.chip_of(loader.load_document(spec_file))
    try:
        params = core_params(chip)
    except ModelError:
        return None
    return params, chip.dma.engines, chip.dma.engine_bandwidth.to("B/s").magnitude


def core_variant(base: model.Base, point: dict[str, float]):
    """The base chip's core at a design point of :data:`KERNEL_PARAMS` (SI units), as
    :func:`hdl.params.core_params` derives it: the tensor array at ``rows x cols``, the tensor
    clock, the SBUF split over the partitions, and the DMA bandwidth per core the lower of its
    engines' and its share of HBM. None when the chip cannot be simulated."""
    from hdl.params import core_dma_bandwidth  # noqa: PLC0415

    found = _base_core(base.spec_file)
    if found is None:
        return None
    params, engines, engine_bw = found
    if all(point[k] == base.values[k] for k in KERNEL_PARAMS):
        return params
    rows, cols, cores = (int(point[k]) for k in ("rows", "cols", "cores"))
    return replace(
        params, rows=rows, cols=cols,
        tensor=replace(params.tensor, rows=rows, cols=cols),
        clocks=tuple((e, float(point["clock"]) if e == "tensor" else c)
                     for e, c in params.clocks),
        sbuf_bytes=int(point["sbuf"] // params.partitions),
        dma_bandwidth=core_dma_bandwidth(engines, cores, engine_bw, point["hbm_bandwidth"]))


_TIMES: dict = {}


def evaluate_sweep(values: dict[str, np.ndarray], base: model.Base, work,
                   metrics: list[str]) -> dict[str, np.ndarray]:
    """:data:`SWEEP_METRICS` of a sweep's design points (``values``: every parameter of
    :data:`explore.model.PARAMS`, arrays in SI units) for a compiled transformer workload:
    its split and schedule are the workload's (``tensor`` as the sweep sets it). Points are
    grouped by their core (:data:`KERNEL_PARAMS`, with ``chips`` and ``lnc``); each group is
    one vectorised :func:`evaluate_many` over its node counts, link bandwidths and HBM
    capacities, on kernel times cached per core. Points whose core the kernels cannot run on
    (or a GEMM-list workload) are not valid."""
    size = len(values["rows"])
    out = {m: np.full(size, np.nan) for m in metrics}
    if "lowered_valid" in out:
        out["lowered_valid"][:] = 0.0
    t = work.spec
    if t is None or not metrics:
        return out
    from kernels import KernelError  # noqa: PLC0415
    from sim.core import ProgramError  # noqa: PLC0415

    par = t.parallel
    keys = ("rows", "cols", "clock", "sbuf", "hbm_bandwidth", "cores", "chips", "lnc")
    columns = [np.broadcast_to(np.asarray(values[k], float), (size,)) for k in keys]
    # a group number per point from each column's codes (a sweep varies few of them)
    code = np.zeros(size, dtype=np.int64)
    for col in columns:
        if col.size and (col == col[0]).all():
            continue
        uniq, where = np.unique(col, return_inverse=True)
        code = code * len(uniq) + where.reshape(-1)
    firsts = np.unique(code, return_index=True)[1] if size else []
    for j in firsts:
        row = [c[j] for c in columns]
        idx = np.nonzero(code == code[j])[0] if len(firsts) > 1 else np.arange(size)
        point = dict(zip(keys, (float(x) for x in row), strict=True))
        params = core_variant(base, point)
        if params is None:
            continue
        times = _TIMES.get(params)
        if times is None:
            times = _TIMES[params] = KernelTimes(params)
        b = replace(base, values={**base.values, **point})
        try:
            m = evaluate_many(
                t, b, times, tp=work.tensor, pp=par.pipeline, micro_batch=par.micro_batch,
                nodes=np.asarray(values["nodes"], float)[idx].astype(np.int64),
                recompute=par.recompute, sequence_parallel=par.sequence_parallel,
                zero1=t.shard_optimizer,
                values={k: np.asarray(values[k], float)[idx]
                        for k in ("link_bandwidth", "hbm_capacity")})
        except (KernelError, ProgramError):
            continue
        for name in metrics:
            out[name][idx] = m[name.removeprefix("lowered_")]
    return out


class StepError(ValueError):
    """A step that cannot be split or run as asked (one line: what was expected, found)."""


def check(t: Transformer, layout: Layout, ranks: int) -> None:
    """Refuse a split the step cannot take, naming what was expected and what was found."""
    tp, pp, mb = layout.tp, layout.pp, layout.micro_batch
    for name, v in (("--tp", tp), ("--pp", pp), ("--micro-batch", mb)):
        if v < 1:
            raise StepError(f"expected {name} of at least 1, found {v}")
    if layout.recompute not in RECOMPUTE:
        raise StepError(f"expected --recompute one of {', '.join(RECOMPUTE)}, "
                        f"found {layout.recompute!r}")
    if ranks % (tp * pp):
        raise StepError(f"expected TP x PP ({tp} x {pp}) to divide the {ranks} ranks")
    if t.heads % tp or (t.kv_heads or t.heads) % tp and tp % (t.kv_heads or t.heads):
        raise StepError(f"expected --tp to divide the {t.heads} heads of {t.name} (and its "
                        f"key/value heads, or be a multiple of them), found {tp}")
    if pp > t.layers:
        raise StepError(f"expected --pp of at most the {t.layers} layers, found {pp}")
    dp = ranks // (tp * pp)
    if t.batch % (dp * mb):
        raise StepError(f"expected DP x micro-batch ({dp} x {mb}) to divide the global batch "
                        f"of {t.batch} sequences")


@dataclass
class Run:
    system: str
    workload: Transformer
    result: StepResult
    simulated: int


def resolve(system: str):
    """(base, core parameters, default node count) of an instance or cluster spec."""
    from hdl.params import ModelError, core_params  # noqa: PLC0415
    from specs import loader  # noqa: PLC0415

    doc = loader.load_document(system)
    if doc.kind != "system" or doc.spec.level not in ("instance", "cluster"):
        raise StepError(f"expected an instance or cluster system spec, found "
                        f"{doc.kind} {doc.name!r}")
    chip, chain = model.chip_of(doc)
    try:
        params = core_params(chip)
    except ModelError as exc:
        raise StepError(str(exc)) from None
    base = model.base_from_spec(system)
    nodes = doc.spec.count if doc.spec.level == "cluster" else 1
    if doc.spec.level == "cluster":
        base = replace(base, values={**base.values, "nodes": 1.0})
    return base, params, nodes


def load_workload(workload: str, seq: int | None = None, batch: int | None = None
                  ) -> Transformer:
    """A transformer workload, its sequence length and global batch (sequences per step)
    replaced where given."""
    from .workloads import load_spec  # noqa: PLC0415

    t = load_spec(workload)
    if not isinstance(t, Transformer):
        raise StepError(f"expected a transformer workload, found the GEMM list {t.name!r}")
    update = {k: v for k, v in (("seq", seq), ("batch", batch)) if v is not None}
    for k, v in update.items():
        if not isinstance(v, int) or v < 1:
            raise StepError(f"expected --{k} of at least 1, found {v}")
    return t.model_copy(update=update) if update else t


def from_cli(system: str, workload: str, *, tp=None, pp=None, dp=None, nodes=None,
             micro_batch=None, recompute=None, sequence_parallel=True, zero1=True,
             gemm_only=False, seq=None, batch=None, times: KernelTimes | None = None) -> Run:
    """``gen step``: options left ``None`` take the workload's (or the system's) own."""
    t = load_workload(workload, seq, batch)
    base, params, default_nodes = resolve(system)
    par = t.parallel
    tp = par.tensor if tp is None else tp
    pp = par.pipeline if pp is None else pp
    per_node = int(base.values["cores"] / base.values["lnc"] * base.values["chips"]
                   * base.instances)
    if nodes is None:
        nodes = default_nodes if dp is None else -(-dp * tp * pp // per_node)
    if nodes < 1:
        raise StepError(f"expected --nodes of at least 1, found {nodes}")
    ranks = per_node * nodes
    layout = Layout(tp=tp, pp=pp, micro_batch=par.micro_batch if micro_batch is None
                    else micro_batch, recompute=recompute or par.recompute,
                    sequence_parallel=sequence_parallel and par.sequence_parallel,
                    zero1=zero1 and t.shard_optimizer, gemm_only=gemm_only)
    check(t, layout, ranks)
    if dp is not None and dp * tp * pp != ranks:
        raise StepError(f"expected TP x PP x DP to be the {ranks} ranks of {nodes} node(s), "
                        f"found {tp} x {pp} x {dp} = {tp * pp * dp}")
    times = times or KernelTimes(params)
    before = times.computed
    result = evaluate(t, base, times, layout, nodes)
    return Run(system, t, result, times.computed - before)


def grid(system: str, workload: str, *, tp=None, pp=None, nodes=None, micro_batch=None,
         recompute=None, sequence_parallel=True, zero1=True, gemm_only=False, seq=None,
         batch=None, times: KernelTimes | None = None):
    """Every combination of the given lists (``None``: the workload's or system's own) as a
    table: one row per design point, the split then :data:`METRICS` (pandas DataFrame)."""
    import pandas as pd  # noqa: PLC0415

    t = load_workload(workload, seq, batch)
    base, params, default_nodes = resolve(system)
    par = t.parallel
    axes = {"tp": tp or [par.tensor], "pp": pp or [par.pipeline],
            "micro_batch": micro_batch or [par.micro_batch],
            "recompute": recompute or [par.recompute], "nodes": nodes or [default_nodes]}
    for name, vals in axes.items():
        if name != "recompute" and min(vals) < 1:
            raise StepError(f"expected --{name.replace('_', '-')} values of at least 1, "
                            f"found {min(vals)}")
    mesh = np.meshgrid(*(np.asarray(v, dtype=object) for v in axes.values()), indexing="ij")
    cols = {k: m.ravel() for k, m in zip(axes, mesh, strict=True)}
    times = times or KernelTimes(params)
    out = evaluate_many(t, base, times, tp=cols["tp"].astype(int), pp=cols["pp"].astype(int),
                        micro_batch=cols["micro_batch"].astype(int),
                        nodes=cols["nodes"].astype(int),
                        recompute=cols["recompute"].astype(str),
                        sequence_parallel=sequence_parallel and par.sequence_parallel,
                        zero1=zero1 and t.shard_optimizer, gemm_only=gemm_only)
    table = pd.DataFrame({"workload": t.name, **{k: v for k, v in cols.items()},
                          **{k: out[k] for k in METRICS}})
    for k in ("tp", "pp", "micro_batch", "nodes"):
        table[k] = table[k].astype(int)
    table["recompute"] = table["recompute"].astype(str)
    return t, table
