"""Tensor-engine benchmarks, each a ratio against a baseline measured in the same run.

1. Emission: time (wall, and CPU of the process and its children) and peak memory to write
   the Verilog of an array (PE, row, column and control emitted once, structural top) against
   elaborating the same array flat in Amaranth;
   the array takes ``--formats`` (one or more input formats) or a chip's whole tensor engine
   (``--spec trn2``: every format of the spec, fp8 at double rate, at each size).
2. Golden model: a bit-exact 128 x 128 x 512 bf16 matmul tile against numpy's float32 matmul
   (compiled kernel, warm: its one-off compile is timed apart; also the numpy-pass reference).
3. Simulation: Verilator against Icarus, simulated cycles per second on one 16 x 16 array fed by
   the on-DUT harness (whole tiles per await; only the awaits are timed, results still checked).
4. Area: the multi-format PE of ``--spec`` (default trn2) against one single-format PE per
   format (fp8 formats at double rate) and, where the spec has MX formats (trn3), against the
   multi-format PE without them, each synthesised by :mod:`hdl.area` (Yosys generic
   ``synth``, NAND2 equivalents; cached per module text).
5. Modules: area and synthesis CPU of each emitted module of the full-scale tensor engine of
   ``--spec`` (PE, PSUM column, row-group runner, sequencer).

Run: ``PYTHONPATH=. python benchmarks/tensor.py [--formats bf16 | --spec trn2] [--flat 16,32]
[--hier 32,64,128] [--skip emit,golden,sim,area,modules]``
Each emission runs in a fresh subprocess so that its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import dataclasses
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
n, flat = int(sys.argv[1]), sys.argv[2] == "flat"
array = json.loads(sys.argv[3])
params = SystolicParams(rows=n, cols=n, formats=tuple(array["formats"]),
                        double_rate=tuple(array["double_rate"]),
                        quarter_rate=tuple(array["quarter_rate"]))
cpu0 = sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                              resource.getrusage(resource.RUSAGE_CHILDREN)))
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
usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
peak = max(u.ru_maxrss for u in usage) / 1024
cpu = sum(u.ru_utime + u.ru_stime for u in usage) - cpu0
print(json.dumps({"seconds": seconds, "cpu_s": cpu, "peak_mib": peak, "bytes": size}))
"""


def array_params(formats: str, spec: str | None, n: int = 128, moving_max: int = 512):
    """The array to measure: a spec's tensor engine at ``n`` x ``n``, or ``formats`` (comma
    list; its 8-bit floats at double rate)."""
    from hdl.numerics.formats import FloatFormat, input_format_by_name
    from hdl.tensor.params import SystolicParams

    if spec is not None:
        from hdl.params import tensor_params
        from specs.loader import load

        p = tensor_params(load(spec), "full")
        return SystolicParams(rows=n, cols=n, formats=p.formats, double_rate=p.double_rate,
                              quarter_rate=p.quarter_rate, moving_max=moving_max)
    names = tuple(formats.split(","))
    double = tuple(f for f in names if isinstance(input_format_by_name(f), FloatFormat)
                   and input_format_by_name(f).bits == 8)
    return SystolicParams(rows=n, cols=n, formats=names, double_rate=double,
                          moving_max=moving_max)


def bench_emit(n: int, style: str, timeout: float, array) -> dict:
    spec = json.dumps({"formats": array.formats, "double_rate": array.double_rate,
                       "quarter_rate": array.quarter_rate})
    try:
        proc = subprocess.run([sys.executable, "-c", _EMIT, str(n), style, spec], cwd=ROOT,
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


def bench_sim(programs: dict[str, int], array) -> dict:
    from sim.tb import runner
    from sim.tb.systolic import TOP, harness_verilog

    params = dataclasses.replace(array, rows=16, cols=16, moving_max=64)
    text = harness_verilog(params)
    out = {}
    for sim, count in programs.items():
        build_begin = time.perf_counter()
        runner.build(text, TOP, sim)
        build = time.perf_counter() - build_begin
        report = Path(tempfile.mkdtemp()) / "throughput.json"
        tb = {"array": asdict(params), "seed": 1, "programs": count, "report": str(report),
              "format": params.formats[0]}
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


def bench_area(spec: str) -> dict:
    """NAND2 equivalents and flip-flops of the multi-format PE of ``spec`` against a
    single-format PE per format, and against their sum (one array per format); with MX
    formats in the spec, also against the same multi-format PE without them."""
    from amaranth.back import verilog

    from hdl import area
    from hdl.tensor.pe import ProcessingElement
    from specs.loader import load

    multi = array_params("", spec)
    pes = {"multi": multi}
    if multi.has_mx:  # the same PE without the block-scaled formats: what MX costs
        pes["multi-no-mx"] = dataclasses.replace(
            multi, formats=tuple(f for f in multi.formats if not multi.is_mx(f)))
    for f in multi.formats:
        pes[f] = dataclasses.replace(multi, formats=(f,),
                                     double_rate=(f,) if multi.is_double(f) else (),
                                     quarter_rate=(f,) if multi.is_quarter(f) else ())
    sources = {f"pe_{name.replace('-', '_')}": verilog.convert(
        ProcessingElement(p), name=f"pe_{name.replace('-', '_')}", emit_src=False)
        for name, p in pes.items()}
    begin = time.perf_counter()
    results = area.synthesize(sources, sram_bit=load(spec).area.sram_bit)
    seconds = time.perf_counter() - begin
    out = {"seconds": seconds, "pes": {}}
    for name in pes:
        a = results[f"pe_{name.replace('-', '_')}"]
        flops = sum(n for c, n in a.cells.items() if "FF" in c)
        out["pes"][name] = {"gates": a.gates, "flip_flops": flops}
    singles = [v["gates"] for k, v in out["pes"].items() if k in multi.formats]
    out["sum_of_single"] = sum(singles)
    out["multi_over_largest_single"] = out["pes"]["multi"]["gates"] / max(singles)
    out["multi_over_sum"] = out["pes"]["multi"]["gates"] / sum(singles)
    if "multi-no-mx" in out["pes"]:
        out["multi_over_no_mx"] = (out["pes"]["multi"]["gates"]
                                   / out["pes"]["multi-no-mx"]["gates"])
    return out


def bench_modules(spec: str) -> dict:
    """NAND2 equivalents, flip-flops and synthesis CPU of each emitted module of the
    full-scale tensor engine of ``spec`` (:func:`generators.tensor.verilog_modules`): PE,
    PSUM column, row-group runner (where the array has one) and sequencer, each synthesised
    once by :mod:`hdl.area` into an empty cache, leaves first (so each module's own logic is
    timed, its submodules black boxes); ``total`` rolls each module up with its children."""
    import resource

    from generators.tensor import TOP, module_names, verilog_modules
    from hdl import area
    from hdl.params import tensor_params
    from specs.loader import load

    chip = load(spec)
    params = tensor_params(chip, "full")
    names, texts = module_names(TOP), verilog_modules(params, TOP)
    order = [names[k] for k in ("pe", "column", "group", "control") if k in names]
    sources = {n: texts[f"{n}.v"] for n in order if f"{n}.v" in texts}
    out, areas = {}, {}
    with tempfile.TemporaryDirectory() as cache:
        for name in sources:
            done = {k: sources[k] for k in areas}
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            begin = time.process_time()
            result = area.synthesize({**done, name: sources[name]}, cache=cache, jobs=1,
                                     sram_bit=chip.area.sram_bit)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            areas[name] = a = result[name]
            out[name] = {"gates": round(a.gates), "flip_flops": a.flip_flops,
                         "children": dict(a.children),
                         "cpu_s": round(time.process_time() - begin + after.ru_utime
                                        - before.ru_utime + after.ru_stime - before.ru_stime,
                                        1)}
    for name in sources:
        out[name]["total"] = round(area.rollup(areas, name))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hier", default="32,64,128")
    parser.add_argument("--flat", default="16,32")
    parser.add_argument("--flat-timeout", type=float, default=1200)
    parser.add_argument("--formats", default="bf16",
                        help="comma list of the array's input formats")
    parser.add_argument("--spec", default=None,
                        help="measure this chip's tensor engine (every format) instead")
    parser.add_argument("--icarus-programs", type=int, default=1)
    parser.add_argument("--verilator-programs", type=int, default=100)
    parser.add_argument("--skip", default="",
                        help="comma list of emit,golden,sim,area,modules")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    array = array_params(args.formats, args.spec)
    results = {"formats": array.formats, "double_rate": array.double_rate}
    if "emit" not in skip:
        results["emit"] = {}
        for n in map(int, args.hier.split(",")):
            results["emit"][f"hier-{n}"] = bench_emit(n, "hier", 600, array)
            print(n, "hier", results["emit"][f"hier-{n}"], flush=True)
        for n in map(int, filter(None, args.flat.split(","))):
            results["emit"][f"flat-{n}"] = bench_emit(n, "flat", args.flat_timeout, array)
            print(n, "flat", results["emit"][f"flat-{n}"], flush=True)
    if "golden" not in skip:
        results["golden"] = bench_golden()
        print("golden", results["golden"], flush=True)
    if "sim" not in skip:
        results["sim"] = bench_sim({"icarus": args.icarus_programs,
                                    "verilator": args.verilator_programs}, array)
        print("sim", results["sim"], flush=True)
    if "area" not in skip:
        results["area"] = bench_area(args.spec or "trn2")
        print("area", results["area"], flush=True)
    if "modules" not in skip:
        results["modules"] = bench_modules(args.spec or "trn2")
        print("modules", results["modules"], flush=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
