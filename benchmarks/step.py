"""Training-step model: a cold kernel-time cache for one design point, and design points per
second with the kernel times cached, on one core. Prints the figures BENCHMARKS.md quotes.

    PYTHONPATH=. PYTHONSAFEPATH=1 python benchmarks/step.py

(``PYTHONSAFEPATH`` keeps ``benchmarks/explore.py`` from shadowing the ``explore`` package.)
"""

from __future__ import annotations

import tempfile
import time

from explore import step
from explore.kerneltimes import KernelTimes
from hdl.core.params import core_params
from specs.loader import load


def main() -> None:
    params = core_params(load("trn1"))
    with tempfile.TemporaryDirectory() as tmp:
        times = KernelTimes(params, tmp)
        t0 = time.perf_counter()
        run = step.from_cli("trn1.32xlarge", "llama2-7b", tp=8, nodes=16, times=times)
        cold = time.perf_counter() - t0
        print(f"cold cache, one design point (llama2-7b, trn1.32xlarge x 16, TP 8): "
              f"{cold:.2f} s, {times.computed} kernels simulated")
        base, _, _ = step.resolve("trn1.32xlarge")
        layouts = [step.Layout(tp=tp, pp=pp, micro_batch=1, recompute=rc)
                   for tp in (8, 16, 32) for pp in (1, 2, 4) for rc in ("selective", "full")]
        for lay in layouts:  # warm the cache
            step.evaluate(run.workload, base, times, lay, 16)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 5.0:
            for lay in layouts:
                step.evaluate(run.workload, base, times, lay, 16)
                n += 1
        rate = n / (time.perf_counter() - t0)
        print(f"warm cache: {rate:,.0f} design points/s (one point per call, "
              f"{len(layouts)} layouts)")


if __name__ == "__main__":
    main()
