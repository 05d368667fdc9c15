"""Tensor-engine benchmarks, each a ratio against a baseline measured in the same run.

1. Emission: time and peak memory to write the Verilog of a bf16 array (PE, row, column and
   control emitted once, structural top) against elaborating the same array flat in Amaranth.
2. Golden model: a bit-exact 128 x 128 x 512 bf16 matmul tile against numpy's float32 matmul
   (compiled kernel, warm: its one-off compile is timed apart; also the numpy-pass reference).
3. Simulation: Verilator against Icarus, simulated cycles per second on one 16 x 16 array fed by
   the on-DUT harness (whole tiles per await; only the awaits are timed, results still checked).

Run: ``PYTHONPATH=. python benchmarks/tensor.py [--fmt bf16] [--flat 16,32] [--hier 32,64,128]
[--skip emit,golden,sim]``
Each emission runs in a fresh subprocess so that its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

_EMIT = """
import json, resource, sys, time, tempfile
from pathlib import Path
from hdl.tensor.params import SystolicParams
n, flat, fmt = int(sys.argv[1]), sys.argv[2] == "flat", sys.argv[3]
params = SystolicParams(rows=n, cols=n, fmt=fmt)
begin = time.perf_counter()
if flat:
    from amaranth.back import verilog
    from hdl.tensor.systolic import SystolicArray
    text = verilog.convert(SystolicArray(params), name="tensor_systolic", emit_src=False)
    size = len(text)
else:
    from generators.tensor import emit
    files = emit(params, Path(tempfile.mkdtemp()), "benchmark")
    size = sum(f.stat().st_size for f in files)
seconds = time.perf_counter() - begin
peak = max(resource.getrusage(who).ru_maxrss
           for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024
print(json.dumps({"seconds": seconds, "peak_mib": peak, "bytes": size}))
"""


def bench_emit(n: int, style: str, timeout: float, fmt: str = "bf16") -> dict:
    try:
        proc = subprocess.run([sys.executable, "-c", _EMIT, str(n), style, fmt], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout, check=True,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    except subprocess.TimeoutExpired:
        return {"seconds": None, "peak_mib": None, "bytes": None, "timeout": timeout}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_golden(repeats: int = 25) -> dict:
    import ml_dtypes

    from sim.golden import systolic
    from sim.golden.systolic import matmul

    rng = np.random.default_rng(0)
    k, m, n = 128, 128, 512
    w = rng.standard_normal((k, m)).astype(ml_dtypes.bfloat16)
    x = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    wb, xb = w.view(np.uint16), x.view(np.uint16)
    w32, x32 = w.astype(np.float32), x.astype(np.float32)

    def best(fn):
        fn()
        times = []
        for _ in range(repeats):
            begin = time.perf_counter()
            fn()
            times.append(time.perf_counter() - begin)
        return min(times)

    compile_s = None
    if systolic.numba is not None:  # a fresh, uncached compile of the kernel the model uses
        begin = time.perf_counter()
        systolic.numba.njit(systolic._sum.signatures[0], fastmath=False)(systolic._sum_kernel)
        compile_s = time.perf_counter() - begin
    golden = best(lambda: matmul(wb, xb, "bf16"))  # best() calls once first: never timed cold
    reference = best(lambda: w32.T @ x32)
    kernel = systolic._sum
    systolic._sum = systolic._sum_reference
    try:
        passes = best(lambda: matmul(wb, xb, "bf16"))
    finally:
        systolic._sum = kernel
    return {"golden_ms": golden * 1e3, "numpy_ms": reference * 1e3,
            "ratio": golden / reference, "numpy_passes_ms": passes * 1e3,
            "compile_s": compile_s}


def bench_sim(programs: dict[str, int], fmt: str) -> dict:
    from hdl.tensor.params import SystolicParams
    from sim.tb import runner
    from sim.tb.systolic import TOP, harness_verilog

    params = SystolicParams(rows=16, cols=16, fmt=fmt, moving_max=64)
    text = harness_verilog(params)
    out = {}
    for sim, count in programs.items():
        build_begin = time.perf_counter()
        runner.build(text, TOP, sim)
        build = time.perf_counter() - build_begin
        report = Path(tempfile.mkdtemp()) / "throughput.json"
        tb = {"array": asdict(params), "seed": 1, "programs": count, "report": str(report)}
        result = runner.run_verilog(text, TOP, "sim.tb.systolic", sim, tb, "throughput",
                                    seed=1)
        if not result.ok:
            raise RuntimeError(f"{sim} throughput run failed: {result}")
        figures = json.loads(report.read_text())
        out[sim] = {"cycles": figures["cycles"], "seconds": figures["seconds"],
                    "cycles_per_s": figures["cycles"] / figures["seconds"],
                    "build_s_incl_cache": build}
    out["ratio"] = out["verilator"]["cycles_per_s"] / out["icarus"]["cycles_per_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hier", default="32,64,128")
    parser.add_argument("--flat", default="16,32")
    parser.add_argument("--flat-timeout", type=float, default=1200)
    parser.add_argument("--fmt", default="bf16", help="format of the arrays")
    parser.add_argument("--icarus-programs", type=int, default=1)
    parser.add_argument("--verilator-programs", type=int, default=100)
    parser.add_argument("--skip", default="", help="comma list of emit,golden,sim")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    results = {"fmt": args.fmt}
    if "emit" not in skip:
        results["emit"] = {}
        for n in map(int, args.hier.split(",")):
            results["emit"][f"hier-{n}"] = bench_emit(n, "hier", 600, args.fmt)
            print(n, "hier", results["emit"][f"hier-{n}"], flush=True)
        for n in map(int, filter(None, args.flat.split(","))):
            results["emit"][f"flat-{n}"] = bench_emit(n, "flat", args.flat_timeout, args.fmt)
            print(n, "flat", results["emit"][f"flat-{n}"], flush=True)
    if "golden" not in skip:
        results["golden"] = bench_golden()
        print("golden", results["golden"], flush=True)
    if "sim" not in skip:
        results["sim"] = bench_sim({"icarus": args.icarus_programs,
                                    "verilator": args.verilator_programs}, args.fmt)
        print("sim", results["sim"], flush=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
