"""NeuronCore RTL benchmarks: full-scale emission, full-scale lint, simulation speed.

1. ``emit``: :func:`generators.core.emit` of a spec's core at full scale in a fresh process:
   wall and CPU seconds (the process and its Yosys child) and peak memory of each.
2. ``lint``: ``verilator --lint-only -Wall`` of those files with the generator's waivers
   (``neuron_core.vlt``), one module at a time, the modules it instantiates port-only
   declarations (:func:`generators.core.lint_parts`): warnings, seconds and peak memory of
   each.
3. ``chip``: ``gen chip SPEC`` (every unit at full scale, the core included) against the same
   chip without the core, each in a fresh process, one after the other: wall, CPU (the
   process and its workers) and peak memory.
4. ``sim``: simulated core cycles per wall-clock second, Verilator against Icarus, on the
   program of :func:`sim.tb.core_programs.throughput_program` at simulation scale, every
   engine busy at once (the testbench quiet: no DMA, status polled every 1024 cycles; builds cached,
   not timed); ``--simulators verilator`` leaves Icarus out.

Reproduce from the repository root: ``PYTHONPATH=. python benchmarks/core_rtl.py``
(``--skip emit,lint,chip,sim`` to leave parts out; results in benchmarks/core_rtl.md and
BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

EMIT = """
import json, resource, sys, time
from pathlib import Path
from generators.core import emit
from hdl.params import core_params
from specs.loader import load
params = core_params(load(sys.argv[1]), "full")
begin, cpu = time.perf_counter(), time.process_time()
files = emit(params, Path(sys.argv[2]), "benchmark")
wall = time.perf_counter() - begin
cpu = time.process_time() - cpu
child = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "yosys_cpu_s": child.ru_utime + child.ru_stime,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "yosys_peak_mib": child.ru_maxrss / 1024,
                  "files": {p.name: p.stat().st_size for p in files}}))
"""


def bench_emit(spec: str, out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", EMIT, spec, str(out)], env=env, cwd=ROOT,
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout.splitlines()[-1])


CHIP = """
import json, resource, sys, time
from pathlib import Path
from generators.chip import generate_chip
from generators.units import UNITS
from specs.loader import load_document
units = None if sys.argv[3] == "core" else [u for u in UNITS if u != "core"]
begin = time.perf_counter()
generate_chip(load_document(sys.argv[1]), Path(sys.argv[2]), "full", units=units)
wall = time.perf_counter() - begin
own, workers = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
print(json.dumps({"wall_s": wall,
                  "cpu_s": sum(r.ru_utime + r.ru_stime for r in (own, workers)),
                  "peak_mib": max(own.ru_maxrss, workers.ru_maxrss) / 1024}))
"""


def bench_chip(spec: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = {}
    for variant in ("core", "no core"):
        with tempfile.TemporaryDirectory() as tmp:
            result = subprocess.run([sys.executable, "-c", CHIP, spec, tmp, variant], env=env,
                                    cwd=ROOT, capture_output=True, text=True, check=True)
        out[variant] = json.loads(result.stdout.splitlines()[-1])
    return out


def bench_lint(out: Path) -> dict:
    """``verilator --lint-only -Wall`` of each part of :func:`generators.core.lint_parts`
    (one process a module): status, warnings (with the first lines of the output when there
    are any), wall and CPU seconds and peak memory of each, Verilator's own by ``wait4``;
    then the totals."""
    from generators.core import lint_parts
    from sim.tb.runner import setup_verilator_env

    env = setup_verilator_env(dict(os.environ))
    results = {}
    for top, files in lint_parts(out).items():
        cmd = ["verilator", "--lint-only", "-Wall", "--top-module", top, "neuron_core.vlt",
               *(str(p.relative_to(out)) for p in files)]
        begin = time.perf_counter()
        with tempfile.TemporaryFile("w+") as log:
            proc = subprocess.Popen(cmd, cwd=out, env=env, stdout=log, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(proc.pid, 0)
            log.seek(0)
            text = log.read()
        warnings = text.count("%Warning") + text.count("%Error")
        results[top] = {"status": os.waitstatus_to_exitcode(status), "warnings": warnings,
                        "wall_s": time.perf_counter() - begin,
                        "cpu_s": usage.ru_utime + usage.ru_stime,
                        "peak_mib": usage.ru_maxrss / 1024,
                        **({"output": text[:3000]} if warnings else {})}
        print(f"lint {top}:", json.dumps(results[top]), flush=True)
    parts = list(results.values())
    results["total"] = {"status": max(abs(r["status"]) for r in parts),
                        "warnings": sum(r["warnings"] for r in parts),
                        "cpu_s": sum(r["cpu_s"] for r in parts),
                        "peak_mib": max(r["peak_mib"] for r in parts)}
    return results


def bench_sim(spec: str, instructions: int, n: int,
              simulators: tuple[str, ...] = ("verilator", "icarus")) -> dict:
    from hdl.params import core_params
    from sim.tb import runner
    from sim.tb.core import core_verilog
    from specs.loader import load

    params = core_params(load(spec), "sim")
    text = core_verilog(spec)
    out = {}
    for sim in simulators:
        runner.build(text, "neuron_core", sim)
        report = Path(tempfile.mkdtemp()) / "throughput.json"
        cfg = {"params": base64.b64encode(pickle.dumps(params)).decode(), "report": str(report),
               "instructions": instructions, "n": n, "cycle_limit": 10_000_000}
        result = runner.run_verilog(text, "neuron_core", "sim.tb.core", sim, cfg,
                                    "throughput", seed=1)
        if not result.ok:
            raise RuntimeError(f"{sim} throughput run failed: {result}")
        figures = json.loads(report.read_text())
        out[sim] = {**figures, "cycles_per_s": figures["cycles"] / figures["seconds"]}
    if {"verilator", "icarus"} <= out.keys():
        out["ratio"] = out["verilator"]["cycles_per_s"] / out["icarus"]["cycles_per_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="trn2")
    ap.add_argument("--skip", default="",
                    help="comma-separated parts to skip: emit,lint,chip,sim")
    ap.add_argument("--instructions", type=int, default=200)
    ap.add_argument("--n", type=int, default=128, help="fp32 elements per partition a tile")
    ap.add_argument("--simulators", default="verilator,icarus",
                    help="comma-separated simulators of the sim part")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    print(f"load average at start: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        if "emit" not in skip or "lint" not in skip:
            print("emit:", json.dumps(bench_emit(args.spec, out)), flush=True)
        if "lint" not in skip:
            print("lint:", json.dumps(bench_lint(out)), flush=True)
    if "chip" not in skip:
        print("chip:", json.dumps(bench_chip(args.spec)), flush=True)
    if "sim" not in skip:
        sims = tuple(filter(None, args.simulators.split(",")))
        print("sim:", json.dumps(bench_sim(args.spec, args.instructions, args.n, sims)),
              flush=True)
    print(f"load average at end: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
