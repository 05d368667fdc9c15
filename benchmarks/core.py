"""Core simulator benchmarks: timing-only speed, and numeric mode against its golden calls.

Reproduce from the repository root: ``PYTHONPATH=. python benchmarks/core.py``
(results and their reading in benchmarks/core.md and BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import functools
import time

import kernels
from hdl.params import core_params
from sim.core import Core
from sim.golden import activation, numerics, systolic, vector
from specs.loader import load

#: The unit golden functions the simulator's numeric mode calls (outermost calls timed).
GOLDEN = [(systolic, "matmul"), (vector, "elementwise"), (vector, "run"),
          (activation, "run"), (numerics, "cast_bits"), (numerics, "widen"),
          (numerics, "encode")]


def timing_only(params, name: str, shape: dict, repeats: int) -> dict:
    k = kernels.KERNELS[name]
    program = kernels.build(params, k, shape, "bf16").program
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        core = Core(params)  # a fresh core: no check results carried over
        t0, c0 = time.perf_counter(), time.process_time()
        result = core.run(program, timing_only=True)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return {"kernel": name, "shape": shape, "instructions": len(program), "seconds": best,
            "per_second": len(program) / best, "per_cpu_second": len(program) / best_cpu,
            "predicted_ms": result.time * 1e3}


def numeric(params, name: str, shape: dict, dtype: str) -> dict:
    spent = {"golden": 0.0, "depth": 0}

    def timed(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            spent["depth"] += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent["depth"] -= 1
                if spent["depth"] == 0:
                    spent["golden"] += time.perf_counter() - t0
        return wrapper

    saved = [(mod, attr, getattr(mod, attr)) for mod, attr in GOLDEN]
    k = kernels.KERNELS[name]
    kernels.run(params, k, {d: min(v, 8) for d, v in shape.items()}, dtype)  # JIT warm-up
    for mod, attr, fn in saved:
        setattr(mod, attr, timed(fn))
    try:
        t0 = time.perf_counter()
        run = kernels.run(params, k, shape, dtype, seed=1)
        total = time.perf_counter() - t0
    finally:
        for mod, attr, fn in saved:
            setattr(mod, attr, fn)
    return {"kernel": name, "shape": shape, "dtype": dtype, "instructions": run.instructions,
            "seconds": total, "golden": spent["golden"], "ratio": total / spent["golden"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--spec", default="trn1")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    params = core_params(load(args.spec))
    print(f"timing-only on {args.spec} (best of {args.repeats}):")
    print("| kernel | shape | instructions | seconds | instructions/s | per CPU second | "
          "predicted |")
    print("|---|---|---|---|---|---|---|")
    for name, shape in (("gemm", dict(M=4096, K=8192, N=8192)),
                        ("gemm_naive", dict(M=4096, K=8192, N=8192)),
                        ("softmax", dict(R=65536, C=4096))):
        r = timing_only(params, name, shape, args.repeats)
        print(f"| {name} | {shape} | {r['instructions']:,} | {r['seconds']:.3f} | "
              f"{r['per_second']:,.0f} | {r['per_cpu_second']:,.0f} | "
              f"{r['predicted_ms']:.3f} ms |")
    print(f"\nnumeric on {args.spec}: whole run (build, inputs, check, run, outputs) against "
          f"the time inside the unit golden calls:")
    print("| kernel | shape | dtype | instructions | run s | golden s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, shape, dtype in (("gemm", dict(M=512, K=1024, N=1024), "bf16"),
                               ("gemm_bias_gelu", dict(M=512, K=1024, N=1024), "bf16"),
                               ("softmax", dict(R=1024, C=2048), "fp32"),
                               ("layernorm", dict(R=1024, C=2048), "bf16"),
                               ("adam", dict(R=1024, C=2048), "fp32")):
        r = numeric(params, name, shape, dtype)
        print(f"| {name} | {shape} | {dtype} | {r['instructions']:,} | {r['seconds']:.3f} | "
              f"{r['golden']:.3f} | {r['ratio']:.2f}x |")


if __name__ == "__main__":
    main()
