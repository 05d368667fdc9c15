"""The lowered training step (:mod:`explore.step`) as sweep metrics of ``gen explore``
(:func:`evaluate_sweep`): design points grouped by the core their kernels run on
(:func:`core_variant`), each group one vectorised :func:`~explore.step.evaluate_many`."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np

from . import model
from .kerneltimes import KernelTimes
from .step import METRICS, evaluate_many

__all__ = ["KERNEL_PARAMS", "SWEEP_METRICS", "core_variant", "evaluate_sweep", "kernel_times"]


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


def kernel_times(params) -> KernelTimes:
    """The kernel times of a core, one object per core parameters in this process."""
    times = _TIMES.get(params)
    if times is None:
        times = _TIMES[params] = KernelTimes(params)
    return times


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
        times = kernel_times(params)
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
