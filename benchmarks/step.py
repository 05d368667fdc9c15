"""Training-step model: a cold kernel-time cache for one design point, and design points per
second with the kernel times cached, on one core, through :func:`explore.step.evaluate_many`
and through the sweep metrics of ``gen explore`` (:func:`explore.step_sweep.evaluate_sweep`,
which groups points by core). Prints the figures benchmarks/step.md quotes.

    PYTHONPATH=. PYTHONSAFEPATH=1 python benchmarks/step.py

(``PYTHONSAFEPATH`` keeps ``benchmarks/explore.py`` from shadowing the ``explore`` package.)
"""

from __future__ import annotations

import math
import tempfile
import time

import numpy as np

from explore import step, step_cli, step_sweep
from explore.kerneltimes import KernelTimes
from hdl.params import core_params
from specs.loader import load


def main() -> None:
    params = core_params(load("trn1"))
    with tempfile.TemporaryDirectory() as tmp:
        times = KernelTimes(params, tmp)
        t0 = time.perf_counter()
        run = step_cli.from_cli("trn1.32xlarge", "llama2-7b", tp=8, nodes=16, times=times)
        cold = time.perf_counter() - t0
        print(f"cold cache, one design point (llama2-7b, trn1.32xlarge x 16, TP 8): "
              f"{cold:.2f} s, {times.computed} kernels simulated")
        base, _, _ = step_cli.resolve("trn1.32xlarge")
        t = run.workload
        # every point valid: 3 TP x 3 PP x 2 recompute x 3 node counts x 2,000 EFA bandwidths
        grid = np.meshgrid([8, 16, 32], [1, 2, 4], [1, 2], [16, 32, 64],
                           np.linspace(0.5, 4.0, 2000) * base.efa_bandwidth, indexing="ij")
        tp, pp, rc, nodes, efa = (x.ravel() for x in grid)
        args = dict(tp=tp.astype(int), pp=pp.astype(int), micro_batch=1,
                    nodes=nodes.astype(int), recompute=rc.astype(int),
                    values={"efa_bandwidth": efa})
        t0 = time.perf_counter()
        step.evaluate_many(t, base, times, **args)
        warm = time.perf_counter() - t0
        print(f"warming the cache for {len(tp):,} points ({times.computed} kernels in all): "
              f"{warm:.1f} s")
        best = math.inf
        for _ in range(3):
            t0 = time.perf_counter()
            out = step.evaluate_many(t, base, times, **args)
            best = min(best, time.perf_counter() - t0)
        assert out["valid"].all()
        print(f"cached kernel times: {len(tp) / best:,.0f} design points/s "
              f"({len(tp):,} points in {best:.3f} s, best of 3)")

        # gen explore's lowered-step metrics: nodes x link bandwidth x HBM capacity on the
        # base core (one group), every point's kernels cached
        from explore import model, workloads  # noqa: PLC0415
        from explore import run as runs

        work = workloads.load("llama2-7b", tensor=8)
        mesh = np.meshgrid([16, 32, 64, 128], np.linspace(0.5, 2.0, 250)
                           * base.values["link_bandwidth"],
                           np.linspace(1.0, 2.0, 100) * base.values["hbm_capacity"],
                           indexing="ij")
        size = mesh[0].size
        values = {k: np.full(size, base.values[k]) for k in model.PARAMS}
        values.update(nodes=mesh[0].ravel().astype(float), link_bandwidth=mesh[1].ravel(),
                      hbm_capacity=mesh[2].ravel())
        step_sweep._TIMES[params] = times
        metrics = list(step_sweep.SWEEP_METRICS)
        best = math.inf
        for _ in range(3):
            t0 = time.perf_counter()
            out = step_sweep.evaluate_sweep(values, base, work, metrics)
            best = min(best, time.perf_counter() - t0)
        assert out["lowered_valid"].all()
        print(f"gen explore lowered-step metrics: {size / best:,.0f} design points/s "
              f"({size:,} points in {best:.3f} s, best of 3)")
        t0 = time.perf_counter()
        runs.evaluate_chunk({k: values[k] for k in ("nodes", "link_bandwidth",
                                                    "hbm_capacity")},
                            base, work, list(model.METRICS) + metrics, 0)
        whole = time.perf_counter() - t0
        print(f"the same points with the analytic model's metrics too (one chunk, as "
              f"gen explore runs it): {size / whole:,.0f} design points/s")


if __name__ == "__main__":
    main()
