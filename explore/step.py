"""A transformer training step lowered to core kernels and scheduled over a cluster.

**Lowering** (:mod:`explore.step_lowering`): each micro-batch's kernels, forward and
backward, with their shapes and counts.

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

The same step as sweep metrics of ``gen explore``: :mod:`explore.step_sweep`; ``gen step``'s
front door: :mod:`explore.step_cli`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kernels import KERNELS
from sim.system import collectives, formulas

from . import model
from .kerneltimes import KernelTimes
from .step_lowering import RECOMPUTE, Call, Layout, activation_bytes, flat, lower
from .workloads import DTYPES, Transformer, compile_transformer, transformer_params

__all__ = ["METRICS", "PARTS", "SYSTEM_PARAMS", "StepError", "StepResult", "evaluate",
           "evaluate_many"]

#: The parts of the step time, in the order they are reported and stacked.
PARTS = ("gemm", "other", "communication", "bubble", "optimizer")


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
        shape = KERNELS[c.kernel].per_core(dict(c.shape), lnc)
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
    calls = lower(t, layout, times.params)
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
    return _time([replace(flat("optimizer", "adam", shard, "fp32", 1), part="optimizer")],
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


class StepError(ValueError):
    """A step that cannot be split or run as asked (one line: what was expected, found)."""
