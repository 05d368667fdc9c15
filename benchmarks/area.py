"""Area from synthesis: time to synthesise and roll up every module `gen chip` emits for a chip.

1. Emit the chip's RTL (full scale) into a temporary directory, without synthesis.
2. First pass: synthesise every emitted module and the tensor array at the fit's shapes into
   the cache (an empty one unless ``--cache`` names one: then this pass is cold) and roll
   up engine, core and chip (``generators.area.chip_area``, as ``gen chip --area`` does):
   wall time, and the CPU time of the Yosys processes.
3. Second pass: the same again on the filled cache.

With ``--before SRC``, instead: cold passes, each into an empty cache, one after the other
in this run, on the RTL that the source tree ``SRC`` emits (the baseline: ``git archive main
| tar -x -C SRC``) and on this tree's: the chip's modules alone (the chip's roll-up), then
with the fit (as ``gen chip --area``); then the cached pass. Both are synthesised by this
tree's flow, so the ratios are the RTL's. Wall and CPU ratios of the cold passes, and each
module's NAND2 in both.

With ``--flow-before SRC``, instead: cold passes with the fit (as ``gen chip --area``),
each in a fresh process into an empty cache, of the source tree ``SRC``'s flow (the baseline:
``git archive main | tar -x -C SRC``) and of this tree's, alternately, ``--rounds`` times
each: wall, Yosys CPU, the process's own CPU, the chip's NAND2, the fit's residuals and
terms. With ``--held-out RxC...``, the spec's full-scale tensor array is then synthesised
whole at those shapes (its own PE each) and each flow's fitted terms compared with it.

With ``--compare MODULE...``, instead: each named module synthesised with the script of
:mod:`hdl.area` and with the reference flow below (Yosys's default ``synth``: resource
sharing and ABC's default script), no cache: NAND2 equivalents and CPU seconds of each.

With ``--profile MODULE...`` (``all``: every emitted module), instead: each module alone,
one at a time, no cache: CPU seconds, cells, NAND2 equivalents, and the share of Yosys's
time of its costliest passes (from Yosys's time-stamped log) with the number of times each
ran (``opt`` repeats its passes until the design stops changing).

The load average is printed with each figure: the machine is shared, and synthesis is CPU
bound. Usage: PYTHONPATH=. python benchmarks/area.py [--chip trn2] [--cache DIR]
[--jobs N] [--before SRC] [--flow-before SRC [--rounds N] [--held-out RxC...]]
[--compare MODULE... | --profile MODULE...|all] [--rtl DIR]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from generators.area import chip_area
from generators.units import UNITS
from hdl import area
from specs.loader import load_document


def emitted_files(doc, out: Path) -> dict[str, list[list[Path]]]:
    rtl = out / "rtl"
    rtl.mkdir(parents=True, exist_ok=True)
    emitted: dict[str, list[list[Path]]] = {}
    for name, unit in UNITS.items():
        # Not the core: it assembles the engines the others count (and takes minutes and
        # gigabytes to emit at full scale).
        if unit.unsupported(doc.spec) or not unit.area:
            continue
        for params in unit.params(doc.spec, "full"):
            files = unit.emit(params, rtl, "")
            emitted.setdefault(name, []).append([rtl / p.name for p in files])
    return emitted


#: The reference: ``synth -flatten`` as Yosys runs it by default (``share``, then ABC's default
#: script), memories kept unmapped as in hdl/area.py.
REFERENCE = ("synth -flatten -top {top} -run :fine; opt -fast -full; opt -full; techmap; "
             "opt -fast; abc; opt -fast")


def compare(rtl: Path, modules: list[str], sram_bit: float) -> None:
    sources = {p.stem: p.read_text() for p in sorted(rtl.glob("*.v"))}
    for top in modules:
        libs = {n: t for n, t in sources.items() if n != top and n in sources[top]}
        figures = []
        for script in (area.SCRIPT, REFERENCE):
            cpu0 = children_cpu()
            stat = area._run(top, sources[top], libs, script=script)
            by_type = stat["modules"].get(f"\\{top}", stat["design"])["num_cells_by_type"]
            cells = {c: n for c, n in by_type.items() if c != "$mem_v2" and c not in sources}
            gates = area.ModuleArea(top, cells, stat["memory_bits"], sram_bit=sram_bit).gates
            figures.append((gates, children_cpu() - cpu0))
        (new, new_cpu), (ref, ref_cpu) = figures
        print(f"{top}: {new:,.0f} NAND2 in {new_cpu:.1f} s CPU; reference {ref:,.0f} NAND2 in "
              f"{ref_cpu:.1f} s CPU; {100 * (new / ref - 1):+.2f} %; load average "
              f"{os.getloadavg()[0]:.1f}")


def profile(rtl: Path, modules: list[str], sram_bit: float) -> None:
    """Each named module (all emitted ones for ``all``) synthesised alone: CPU seconds,
    cells, NAND2 equivalents, and where Yosys's time went, pass by pass."""
    sources = {p.stem: p.read_text() for p in sorted(rtl.glob("*.v"))}
    for top in list(sources) if modules == ["all"] else modules:
        libs = {n: t for n, t in sources.items() if n != top and area._mentions(sources[top], n)}
        if area.structural_children(sources[top], libs) is not None:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "yosys.log"
            cpu0 = children_cpu()
            stat = area._run(top, sources[top], libs, log=log)
            cpu = children_cpu() - cpu0
            text = log.read_text()
        cells = {c: n for c, n in area._cells(stat, top).items() if c not in sources}
        gates = area.ModuleArea(top, cells, stat["memory_bits"], sram_bit=sram_bit).gates
        # "[time] 17.3. Executing OPT_DFF pass": the time until the next step is that step's
        steps = [(float(t), n, p) for t, n, p in re.findall(
            r"^\[(\d+\.\d+)\] ([\d.]+) Executing (\S+)", text, flags=re.M)]
        end = float(re.findall(r"^\[(\d+\.\d+)\]", text, flags=re.M)[-1])
        spent, runs = collections.Counter(), collections.Counter()
        for (t, _, name), (t2, _, _) in zip(steps, [*steps[1:], (end, "", "")], strict=True):
            spent[name] += t2 - t
            runs[name] += 1
        total = sum(spent.values()) or 1.0
        passes = ", ".join(f"{name.lower()} {100 * t / total:.0f} % ({runs[name]}x)"
                           for name, t in spent.most_common(5))
        print(f"{top}: {len(sources[top]) / 1e3:.0f} kB, {cpu:.1f} s CPU, "
              f"{sum(cells.values()):,} cells, {gates:,.0f} NAND2; {passes}; load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)


def baseline_files(doc, source: Path, out: Path) -> dict[str, list[list[Path]]]:
    """The chip's RTL as the source tree ``source`` (the baseline, e.g. ``git archive
    main``) emits it, written under ``out`` by a Python process whose path starts there."""
    code = ("import json, sys; from pathlib import Path; "
            "from benchmarks.area import emitted_files; "
            "from specs.loader import load_document; "
            "e = emitted_files(load_document(sys.argv[1]), Path(sys.argv[2])); "
            "print(json.dumps({u: [[str(p) for p in f] for f in g] for u, g in e.items()}))")
    env = {**os.environ, "PYTHONPATH": str(source)}
    done = subprocess.run([sys.executable, "-c", code, doc.spec.name, str(out)], cwd=source,
                          env=env, check=True, capture_output=True, text=True)
    found = json.loads(done.stdout.splitlines()[-1])
    return {u: [[Path(p) for p in f] for f in g] for u, g in found.items()}


def before_and_after(doc, before, after, cache: Path, jobs: int | None) -> None:
    """Cold synthesis and roll-up of the chip, of the baseline's RTL (``before``) and of
    this tree's (``after``), each into an empty cache, one after the other in this run:
    first the chip's modules alone (``chip_area`` without the fit: the chip's roll-up), then
    with the fit (``chip_area`` as ``gen chip --area`` runs it, into another empty cache);
    then cached. Wall, Yosys CPU and the command's own CPU (emitting the fit's shapes) of
    each, their ratios, and each module's NAND2 in both (a module of one RTL only is listed
    with its instances)."""
    out = {}
    for fit in (False, True):
        for label, emitted in (("before", before), ("after", after)):
            area.CACHE = cache / f"{label}-{'fit' if fit else 'alone'}"
            cpu0, own0, t0 = children_cpu(), time.process_time(), time.perf_counter()
            _, summary = chip_area(doc.spec, emitted, synthesise=True, jobs=jobs, fit=fit)
            figures = (time.perf_counter() - t0, children_cpu() - cpu0,
                       time.process_time() - own0, summary)
            out[label, fit] = figures
            modules = sum(1 for g in emitted.values() for f in g for p in f if p.suffix == ".v")
            print(f"{doc.spec.name} cold, {'with the fit' if fit else 'the chip alone'}, "
                  f"{label}: {modules} modules, {figures[0]:.1f} s wall, {figures[1]:.1f} s "
                  f"Yosys CPU, {figures[2]:.1f} s own CPU, load average "
                  f"{os.getloadavg()[0]:.1f}; chip {summary['chip']:,.0f} NAND2, core "
                  f"{summary['core']:,.0f}", flush=True)
    t0 = time.perf_counter()
    _, summary = chip_area(doc.spec, after, synthesise=True, jobs=jobs)
    print(f"{doc.spec.name} cached, after, with the fit: {time.perf_counter() - t0:.2f} s; "
          f"fit residuals {[round(f['residual'], 4) for f in summary['fit']]}; terms "
          f"{ {k: round(v) for k, v in summary['terms'].items()} }")
    for fit in (False, True):
        (w0, c0, _, s0), (w1, c1, _, s1) = out["before", fit], out["after", fit]
        print(f"after / before, {'with the fit' if fit else 'the chip alone'}: wall "
              f"{w1 / w0:.2f}, Yosys CPU {c1 / c0:.2f}, chip NAND2 "
              f"{100 * (s1['chip'] / s0['chip'] - 1):+.2f} %, core "
              f"{100 * (s1['core'] / s0['core'] - 1):+.2f} %")
    s0, s1 = out["before", True][3], out["after", True][3]

    def total(modules: dict, name: str) -> float:
        m = modules[name]
        return m["gates"] + sum(n * total(modules, c) for c, n in m["children"].items())

    for name in dict.fromkeys([*s0["modules"], *s1["modules"]]):
        m0, m1 = s0["modules"].get(name), s1["modules"].get(name)
        if m0 and m1:
            t0, t1 = total(s0["modules"], name), total(s1["modules"], name)
            print(f"  {name}: own {m0['gates']:,.0f} -> {m1['gates']:,.0f} NAND2; with its "
                  f"instances {t0:,.0f} -> {t1:,.0f}, {100 * (t1 / t0 - 1) if t0 else 0:+.2f} %")
        else:
            m = m0 or m1
            print(f"  {name} ({'before' if m0 else 'after'} only): {m['gates']:,.0f} NAND2")


#: One cold pass with the fit in a fresh process of a source tree (on its path): its figures
#: as one line of JSON.
FLOW_PASS = """
import json, resource, sys, time
from pathlib import Path
from benchmarks.area import emitted_files
from generators.area import chip_area
from hdl import area
from specs.loader import load_document
doc = load_document(sys.argv[1])
emitted = emitted_files(doc, Path(sys.argv[3]))
area.CACHE = Path(sys.argv[2])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu0, own0, t0 = r.ru_utime + r.ru_stime, time.process_time(), time.perf_counter()
_, s = chip_area(doc.spec, emitted, synthesise=True, jobs=int(sys.argv[4]) or None)
wall, own = time.perf_counter() - t0, time.process_time() - own0
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": wall, "cpu": r.ru_utime + r.ru_stime - cpu0, "own": own,
                  "chip": s["chip"], "fit": s["fit"], "terms": s["terms"]}))
"""


def flow_before(doc, source: Path, tmp: Path, jobs: int | None, rounds: int,
                held_out: list[tuple[int, int]]) -> None:
    """Cold passes with the fit, of the baseline tree's flow (``source``) and of this one's,
    alternately, each in a fresh process into an empty cache; then, for ``held_out``
    shapes, each flow's fitted array against the array synthesised whole."""
    here = Path(__file__).resolve().parents[1]
    found: dict[str, list[dict]] = {"before": [], "after": []}
    for i in range(rounds):
        for label, tree in (("before", source.resolve()), ("after", here)):
            env = {**os.environ, "PYTHONPATH": str(tree)}
            done = subprocess.run(
                [sys.executable, "-c", FLOW_PASS, doc.spec.name, str(tmp / f"cache-{label}-{i}"),
                 str(tmp / f"rtl-{label}-{i}"), str(jobs or 0)],
                cwd=tree, env=env, check=True, capture_output=True, text=True)
            f = json.loads(done.stdout.splitlines()[-1])
            found[label].append(f)
            print(f"{doc.spec.name} cold, with the fit, {label}'s flow: {f['wall']:.1f} s wall, "
                  f"{f['cpu']:.1f} s Yosys CPU, {f['own']:.1f} s own CPU, load average "
                  f"{os.getloadavg()[0]:.1f}; chip {f['chip']:,.0f} NAND2; fit at "
                  f"{len(f['fit'])} shapes, residuals (%) "
                  f"{[round(100 * e['residual'], 3) for e in f['fit']]}", flush=True)
    for label, runs in found.items():
        print(f"{label}'s terms: { {k: round(v) for k, v in runs[0]['terms'].items()} }")
    if not held_out:
        return
    import dataclasses

    from generators.tensor import emit
    from hdl.params import tensor_params

    area.CACHE = tmp / "held-out"
    base = tensor_params(doc.spec, "full")
    for rows, cols in held_out:
        files = emit(dataclasses.replace(base, rows=rows, cols=cols),
                     tmp / f"held-out-{rows}x{cols}", "", top="tensor")
        sources = {p.stem: p.read_text() for p in files if p.suffix == ".v"}
        whole = area.rollup(area.synthesize(sources, sram_bit=doc.spec.area.sram_bit,
                                            jobs=jobs), "tensor")
        errors = ", ".join(
            f"{label} {100 * (area.array_area(runs[0]['terms'], rows, cols) / whole - 1):+.3f} %"
            for label, runs in found.items())
        print(f"held out {rows}x{cols}: synthesised {whole:,.0f} NAND2; fitted over "
              f"synthesised, less one: {errors}; load average {os.getloadavg()[0]:.1f}",
              flush=True)


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chip", default="trn2")
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--compare", nargs="+", metavar="MODULE", default=None)
    ap.add_argument("--profile", nargs="+", metavar="MODULE", default=None,
                    help="each module alone: CPU, cells, NAND2, Yosys passes (all: every one)")
    ap.add_argument("--jobs", type=int, default=None, help="modules synthesised at once")
    ap.add_argument("--before", type=Path, default=None, metavar="SRC",
                    help="cold with the RTL that the source tree SRC emits (the baseline, "
                         "e.g. git archive main), then with this tree's, then cached")
    ap.add_argument("--flow-before", type=Path, default=None, metavar="SRC",
                    help="cold with the fit, the flow of the source tree SRC (the baseline, "
                         "e.g. git archive main) and this tree's, alternately, fresh processes")
    ap.add_argument("--rounds", type=int, default=1, help="with --flow-before: passes of each")
    ap.add_argument("--held-out", nargs="+", default=[], metavar="RxC",
                    help="with --flow-before: shapes at which to check each flow's fit")
    ap.add_argument("--rtl", type=Path, default=None,
                    help="with --compare or --profile: RTL already emitted by gen chip (its "
                         "rtl/ folder)")
    args = ap.parse_args()
    doc = load_document(args.chip)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.compare or args.profile:
            if args.rtl is None:
                emitted_files(doc, tmp / "chip")
            if args.compare:
                compare(args.rtl or tmp / "chip" / "rtl", args.compare, doc.spec.area.sram_bit)
            else:
                profile(args.rtl or tmp / "chip" / "rtl", args.profile, doc.spec.area.sram_bit)
            return
        if args.flow_before:
            held_out = [tuple(int(n) for n in s.split("x")) for s in args.held_out]
            flow_before(doc, args.flow_before, tmp, args.jobs, args.rounds, held_out)
            return
        emitted = emitted_files(doc, tmp / "chip")
        if args.before:
            before = baseline_files(doc, args.before.resolve(), tmp / "before")
            before_and_after(doc, before, emitted, args.cache or tmp / "cache", args.jobs)
            return
        modules = sum(1 for g in emitted.values() for f in g for p in f if p.suffix == ".v")
        area.CACHE = args.cache or tmp / "cache"
        for label in ("first pass", "second pass"):
            cpu0, t0 = children_cpu(), time.perf_counter()
            _, summary = chip_area(doc.spec, emitted, synthesise=True, jobs=args.jobs)
            wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
            print(f"{args.chip} {label}: {modules} modules, {wall:.2f} s wall, {cpu:.1f} s "
                  f"Yosys CPU, load average {os.getloadavg()[0]:.1f}; chip "
                  f"{summary['chip']:,.0f} NAND2, core {summary['core']:,.0f}")


if __name__ == "__main__":
    main()
