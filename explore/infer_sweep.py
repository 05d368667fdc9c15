"""Inference (:mod:`explore.infer`, ``gen infer``'s model) as sweep metrics of ``gen explore``
(:func:`evaluate_sweep`), over chip variants and serving configurations.

A serving configuration (:class:`Serving`: batch, prompt and output tokens, GEMM format) is a
workload's ``serving`` entry in the sweep file; every combination of its lists is a workload
of its own (:func:`expand`), named after it, with the workload's ``tensor`` as the replica's
TP degree. At a design point the instance is filled with replicas (``dp`` = logical cores //
TP, as a serving fleet fills it), each running static batching as ``gen infer`` does, on the
point's core (:func:`explore.step_sweep.core_variant`, its kernels simulated once per core and
cached) and its collectives (``link_bandwidth``, ``chips``, ``lnc``). Design points that
differ only in ``nodes`` or ``hbm_capacity`` share one evaluation: inference here runs on one
instance, and the HBM capacity decides only whether the point fits.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from . import model
from .infer import Engine, evaluate, memory
from .infer_lowering import split
from .step_sweep import core_variant, kernel_times

__all__ = ["SWEEP_METRICS", "Serving", "evaluate_sweep", "expand"]

#: Inference figures as sweep metrics: name -> (unit, description).
SWEEP_METRICS = {
    "infer_ttft": ("s", "inference: time to first token (the prefill)"),
    "infer_tpot": ("s", "inference: time per output token (decode step over the context)"),
    "infer_latency": ("s", "inference: TTFT + output x TPOT"),
    "infer_tokens_per_second": ("tokens/s", "inference: output tokens per second of the "
                                            "instance's replicas"),
    "infer_tokens_per_dollar": ("tokens/USD", "inference: output tokens per dollar"),
    "infer_replicas": ("", "inference: replicas of TP ranks on the instance"),
    "infer_memory_bytes": ("B", "inference: weights, KV cache and activations per rank"),
    "infer_valid": ("", "inference: a decoder whose split and core the kernels can run"),
    "infer_fits": ("", "inference: the memory per rank fits its share of HBM"),
}
FLAGS = ("infer_valid", "infer_fits")


@dataclass(frozen=True)
class Serving:
    """One serving configuration of a workload."""

    batch: int
    input: int
    output: int
    dtype: str = "bf16"

    @property
    def suffix(self) -> str:
        return f"b{self.batch}-{self.input}x{self.output}" + \
            ("" if self.dtype == "bf16" else f"-{self.dtype}")


def expand(batch, input_len, output_len, dtype) -> list[Serving]:
    """Every combination of the given lists, in their order."""
    return [Serving(b, i, o, d)
            for b, i, o, d in itertools.product(batch, input_len, output_len, dtype)]


#: Parameters whose value changes an inference's time (``nodes`` and ``hbm_capacity`` do not).
_TIMED = tuple(k for k in model.PARAMS if k not in ("nodes", "hbm_capacity"))


def evaluate_sweep(values: dict[str, np.ndarray], base: model.Base, work,
                   metrics: list[str]) -> dict[str, np.ndarray]:
    """:data:`SWEEP_METRICS` of a sweep's design points (``values``: every parameter of
    :data:`explore.model.PARAMS`, arrays in SI units) for a workload with a ``serving``
    configuration; NaN (and not valid) for one without, an encoder, a point whose logical
    cores are fewer than its TP degree, or whose core the kernels cannot run on."""
    size = len(values["rows"])
    out = {m: np.full(size, np.nan) for m in metrics}
    for f in FLAGS:
        if f in out:
            out[f][:] = 0.0
    t, s = work.spec, work.serving
    if t is None or s is None or not t.causal or not metrics:
        return out
    from kernels import KernelError  # noqa: PLC0415
    from sim.core import ProgramError  # noqa: PLC0415

    full = {k: np.broadcast_to(np.asarray(values[k], float), (size,)) for k in model.PARAMS}
    price = np.broadcast_to(model.price_per_hour(full, base), (size,))
    stacked = np.stack([full[k] for k in _TIMED], axis=1)
    uniq, where = np.unique(stacked, axis=0, return_inverse=True)
    where = where.reshape(-1)
    mem = memory(t, split(t, work.tensor), s.batch, s.input + s.output, s.batch * s.input,
                 s.dtype)
    need = sum(mem.values())
    for j, row in enumerate(uniq):
        idx = np.nonzero(where == j)[0]
        point = {**base.values, **dict(zip(_TIMED, (float(x) for x in row), strict=True))}
        point["hbm_capacity"] = float(full["hbm_capacity"][idx[0]])
        ranks = int(point["chips"] * point["cores"] // point["lnc"])
        params = core_variant(base, point)
        if params is None or ranks < work.tensor or math.isnan(base.rate(s.dtype)):
            continue
        b = replace(base, values=point)
        engine = Engine(t, b, kernel_times(params), tp=work.tensor, lnc=int(point["lnc"]),
                        dtype=s.dtype)
        replicas = ranks // work.tensor
        try:
            r = evaluate(engine, batch=s.batch, input_len=s.input, output_len=s.output,
                         dp=replicas)
        except (KernelError, ProgramError):
            continue
        figures = {"infer_ttft": r.ttft, "infer_tpot": r.tpot, "infer_latency": r.latency,
                   "infer_tokens_per_second": r.tokens_per_second,
                   "infer_replicas": replicas, "infer_memory_bytes": need, "infer_valid": 1.0}
        for name in metrics:
            if name in figures:
                out[name][idx] = figures[name]
        hbm = full["hbm_capacity"][idx] * point["lnc"] / point["cores"]
        if "infer_fits" in out:
            out["infer_fits"][idx] = (need <= hbm).astype(float)
        if "infer_tokens_per_dollar" in out:
            out["infer_tokens_per_dollar"][idx] = r.tokens_per_second * 3600.0 / price[idx]
    return out
