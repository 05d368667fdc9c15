"""``gen step``'s front door: a system spec and a workload resolved, the split checked
(:class:`~explore.step.StepError` naming what was expected and found), one design point
(:func:`from_cli`) or a grid of them (:func:`grid`) evaluated by :mod:`explore.step`."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import model
from .kerneltimes import KernelTimes
from .step import METRICS, StepError, StepResult, evaluate, evaluate_many
from .step_lowering import RECOMPUTE, Layout
from .workloads import Transformer

__all__ = ["Run", "check", "from_cli", "grid", "load_workload", "resolve"]


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
