"""Inference speed: one ``gen infer`` point with its kernel times cached, a 1,000-point
``gen infer`` grid and a 1,000-row ``gen explore`` sweep of the inference metrics (cached),
and a ``gen serve`` simulation of 1,000 requests; each against the same work on a cold
kernel-time store in the same run. Prints the figures benchmarks/infer.md quotes.

    PYTHONPATH=. PYTHONSAFEPATH=1 python benchmarks/infer.py

(``PYTHONSAFEPATH`` keeps ``benchmarks/explore.py`` from shadowing the ``explore`` package.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from explore import infer_cli, serve
from explore.kerneltimes import KernelTimes
from hdl.params import core_params
from specs.loader import load

ROOT = Path(__file__).resolve().parents[1]


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    params = core_params(load("inf2"))
    with tempfile.TemporaryDirectory() as tmp:
        def times():
            return KernelTimes(params, tmp)

        point = dict(tp=24, input_len=128, output_len=3968)
        cold_t = times()
        _, cold = timed(lambda: infer_cli.from_cli("inf2.48xlarge", "llama2-7b",
                                                   times=cold_t, **point))
        warm_t = times()
        p, warm = timed(lambda: infer_cli.from_cli("inf2.48xlarge", "llama2-7b",
                                                   times=warm_t, **point))
        print(f"one gen infer point (inf2.48xlarge llama2-7b TP 24, 128/3968): cached "
              f"{warm:.3f} s ({warm_t.computed} kernels simulated), cold {cold:.3f} s "
              f"({cold_t.computed} simulated): {cold / warm:.1f}x; "
              f"{p.result.tokens_per_second:.1f} tokens/s")
        env = {**os.environ, "TRNGEN_CACHE": tmp, "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-m", "generators.cli", "infer", "inf2.48xlarge", "llama2-7b",
               "--tp", "24", "--input", "128", "--output", "3968", "--format", "json"]
        subprocess.run(cmd, env=env, check=True, capture_output=True, cwd=ROOT)  # store warm
        _, cli = timed(lambda: subprocess.run(cmd, env=env, check=True, capture_output=True,
                                              cwd=ROOT))
        print(f"  the same through the CLI, a new process: {cli:.2f} s wall")

        axes = dict(tp=[4, 8, 12, 24], batch=[1, 2, 3, 4, 6, 8, 12, 16, 24, 32],
                    input_len=[128, 256, 512, 1024, 2048], output_len=[64, 128, 256, 512, 1024])
        cold_t = times()
        (_, table), cold = timed(lambda: infer_cli.grid("inf2.48xlarge", "llama2-7b",
                                                        times=cold_t, **axes))
        warm_t = times()
        (_, table), warm = timed(lambda: infer_cli.grid("inf2.48xlarge", "llama2-7b",
                                                        times=warm_t, **axes))
        ok = int((table["refused"] == "").sum())
        print(f"gen infer grid of {len(table):,} points ({ok} run, the rest refused): cached "
              f"{warm:.2f} s ({warm_t.computed} simulated), cold {cold:.1f} s "
              f"({cold_t.computed} simulated): {cold / warm:.1f}x")

        sweep_file = Path(tmp) / "bench.yaml"
        sweep_file.write_text("""\
sweep:
  name: infer-bench
  base: inf2.48xlarge
  parameters:
    link_bandwidth: {start: 96 GiB/s, stop: 480 GiB/s, num: 25}
    hbm_capacity: [16 GiB, 32 GiB, 48 GiB, 64 GiB]
  workloads:
    - {name: llama2-7b, tensor: 24, serving: {batch: [1, 4, 16, 32, 64], input: 128,
                                              output: 128}}
    - {name: llama2-7b, tensor: 8, serving: {batch: [1, 4, 16, 32, 64], input: 128,
                                             output: 128}}
  metrics: [infer_ttft, infer_tpot, infer_tokens_per_second, infer_tokens_per_dollar,
            infer_valid, infer_fits]
""")
        from explore import run, step_sweep  # noqa: PLC0415

        def sweep(out):
            return run.explore(sweep_file, Path(tmp) / out, progress=False, plot=False)

        step_sweep._TIMES.clear()
        os.environ["TRNGEN_CACHE"] = tmp
        summary, cold = timed(lambda: sweep("cold"))
        step_sweep._TIMES.clear()
        summary, warm = timed(lambda: sweep("warm"))
        print(f"gen explore, inference metrics, {summary['rows']:,} rows ({summary['points']} "
              f"points x 10 serving configurations): cached {warm:.2f} s "
              f"(chunks {summary['compute_seconds']:.2f} s), cold {cold:.1f} s: "
              f"{cold / warm:.1f}x")

        opts = dict(tp=24, rates=[8.0], requests=1000, input_dist="uniform:64-512",
                    output_dist="uniform:32-256", max_batch=32, seed=0)
        cold_t = times()
        (_, _, res), cold = timed(lambda: serve.from_cli("inf2.48xlarge", "llama2-7b",
                                                         times=cold_t, **opts))
        warm_t = times()
        (_, _, res), warm = timed(lambda: serve.from_cli("inf2.48xlarge", "llama2-7b",
                                                         times=warm_t, **opts))
        r = res[0]
        print(f"gen serve, 1,000 requests at 8 req/s (inf2.48xlarge llama2-7b TP 24, "
              f"uniform:64-512 in, uniform:32-256 out, max batch 32): cached {warm:.2f} s "
              f"({warm_t.computed} simulated), cold {cold:.1f} s ({cold_t.computed} "
              f"simulated): {cold / warm:.1f}x; {r.prefill_steps + r.decode_steps:,} steps, "
              f"{r.duration:.0f} s served, {r.tokens_per_second:,.0f} tokens/s, TTFT P50 "
              f"{1e3 * r.ttft_p50:.1f} ms")


if __name__ == "__main__":
    main()
