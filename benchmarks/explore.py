"""Exploration throughput: design points per second on one core, and Dask scaling.

1. The vectorised analytic model (``explore.model.evaluate``) against the same model written
   as a scalar Python loop (``explore.model.evaluate_point``), on the same random design points
   of a trn2.48xlarge running the 7B training step (21 GEMMs, two collectives): points per
   second of each and their ratio.
2. One sweep run through ``explore.run.explore`` in-process, then on a local Dask cluster of
   one worker and of two workers: the chunk phase's seconds (evaluate, build the table, write
   the Parquet part; cluster start-up, joining and plotting left out) and the speed-up.
3. The same chunk tasks submitted to 1 and 2 local workers under Dask's task stream: wall
   time against the tasks' summed compute time, i.e. how many tasks really ran at once (this
   separates Dask's own concurrency from the CPU share the machine grants the run).

Usage: PYTHONPATH=. python benchmarks/explore.py [--points N] [--sweep-points N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the
# ``explore`` package (for the Dask workers too, which inherit sys.path): drop it.
_here = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from explore import model, run, workloads  # noqa: E402


def random_points(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "rows": rng.choice([32.0, 64.0, 128.0, 256.0], n),
        "cols": rng.choice([32.0, 64.0, 128.0, 256.0], n),
        "cores": rng.choice([4.0, 8.0, 16.0], n),
        "lnc": rng.choice([1.0, 2.0], n),
        "clock": rng.uniform(1.4e9, 3.2e9, n),
        "sbuf": rng.choice([8.0, 16.0, 28.0, 48.0], n) * 2**20,
        "hbm_bandwidth": rng.uniform(1e12, 6e12, n),
        "link_bandwidth": rng.uniform(256e9, 2048e9, n),
    }


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def one_core(n_vector: int, n_scalar: int) -> dict:
    base = model.base_from_spec("trn2.48xlarge")
    work = workloads.load("llama2-7b")
    pts = random_points(n_vector)
    vec = best_of(lambda: model.evaluate(pts, base, work), 3)
    sample = [{k: float(a[i]) for k, a in pts.items()} for i in range(n_scalar)]
    scalar = best_of(lambda: [model.evaluate_point(p, base, work) for p in sample], 1)
    vec_rate, scalar_rate = n_vector / vec, n_scalar / scalar
    return {"vector_points_per_s": vec_rate, "scalar_points_per_s": scalar_rate,
            "ratio": vec_rate / scalar_rate, "gemms": len(work.gemms.names)}


SWEEP = """sweep:
  name: bench
  base: trn2.48xlarge
  parameters:
    rows: {{start: 32, stop: 512, factor: 2}}
    cols: {{start: 32, stop: 512, factor: 2}}
    clock: {{start: 1.4 GHz, stop: 3.2 GHz, num: {clocks}}}
    hbm_bandwidth: {{start: 1 TB/s, stop: 6 TB/s, num: 40}}
    sbuf: [8 MiB, 16 MiB, 28 MiB, 48 MiB]
    lnc: [1, 2]
  workloads: [llama2-7b]
  metrics: [step_time, utilisation, tokens_per_second]
  execution: {{chunk_size: 50000, workers: {workers}}}
"""


def dask_scaling(sweep_points: int) -> dict:
    per_clock = 5 * 5 * 40 * 4 * 2
    clocks = max(1, sweep_points // per_clock)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (0, 1, 2):         # 0: in-process, the same chunks and parts
            f = Path(tmp) / f"bench{workers}.yaml"
            f.write_text(SWEEP.format(clocks=clocks, workers=max(workers, 1)))
            s = run.explore(f, Path(tmp) / f"out{workers}", progress=False, dask=workers > 0,
                            plot=False)
            out[workers] = {"points": s["points"], "compute_seconds": s["compute_seconds"],
                            "seconds": s["seconds"], "chunks": s["chunks"]["total"]}
    out["speedup"] = out[1]["compute_seconds"] / out[2]["compute_seconds"]
    return out


def concurrency(chunks: int = 24, size: int = 50_000) -> dict:
    """Chunk tasks on 1 and 2 local workers, timed by Dask's task stream: wall seconds and
    the sum of the tasks' compute seconds (their ratio is how many ran at once)."""
    from distributed import Client, LocalCluster, get_task_stream, wait

    base = model.base_from_spec("trn2.48xlarge")
    work = workloads.load("llama2-7b")
    rng = np.random.default_rng(3)
    parts = [{"clock": rng.uniform(1.4e9, 3.2e9, size),
              "rows": rng.choice([32.0, 64.0, 128.0, 256.0, 512.0], size)}
             for _ in range(chunks)]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cluster, Client(cluster) as client:
                client.run(__import__("importlib").import_module, "explore.run")
                b = client.scatter(base, broadcast=True)
                w = client.scatter(work, broadcast=True)
                t = time.perf_counter()
                with get_task_stream(client) as stream:
                    wait([client.submit(run.chunk_to_file, values, b, w, ["step_time"], i * size,
                                        str(Path(tmp) / f"c{workers}-{i}.parquet"))
                          for i, values in enumerate(parts)])
                wall = time.perf_counter() - t
            busy = sum(s["stop"] - s["start"] for task in stream.data
                       for s in task["startstops"] if s["action"] == "compute")
            out[workers] = {"wall": wall, "busy": busy}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=200_000, help="vectorised points")
    ap.add_argument("--scalar-points", type=int, default=300, help="scalar-loop points")
    ap.add_argument("--sweep-points", type=int, default=1_200_000, help="Dask sweep points")
    args = ap.parse_args()
    print(f"cores: {os.cpu_count()}, load average before: "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    one = one_core(args.points, args.scalar_points)
    print(f"one core, 7B step ({one['gemms']} GEMMs): vectorised "
          f"{one['vector_points_per_s']:,.0f} points/s, scalar loop "
          f"{one['scalar_points_per_s']:,.0f} points/s, ratio {one['ratio']:,.0f}x")
    d = dask_scaling(args.sweep_points)
    for w in (0, 1, 2):
        r = d[w]
        how = "in-process" if w == 0 else f"dask local, {w} worker(s)"
        print(f"{how}: {r['points']:,} points in {r['chunks']} chunks, "
              f"chunks {r['compute_seconds']:.2f} s ({r['points'] / r['compute_seconds']:,.0f} "
              f"points/s), whole sweep {r['seconds']:.2f} s")
    print(f"dask speed-up 1 -> 2 workers: {d['speedup']:.2f}x")
    c = concurrency()
    for w in (1, 2):
        print(f"task stream, {w} worker(s): wall {c[w]['wall']:.2f} s, task compute "
              f"{c[w]['busy']:.2f} s, tasks running at once {c[w]['busy'] / c[w]['wall']:.2f}")
    print(f"load average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}; "
          f"scheduler autogroup: {_autogroup()}")


def _autogroup() -> str:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()
