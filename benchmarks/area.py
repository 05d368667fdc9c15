"""Area from synthesis: time to synthesise and roll up every module `gen chip` emits for a chip.

1. Emit the chip's RTL (full scale) into a temporary directory, without synthesis.
2. First pass: synthesise every emitted module and the tensor array at the fit's shapes into
   the cache (an empty one unless ``--cache`` names one: then this pass is cold) and roll
   up engine, core and chip (``generators.area.chip_area``, as ``gen chip --area`` does):
   wall time, and the CPU time of the Yosys processes.
3. Second pass: the same again on the filled cache.

With ``--before``, instead: the cold pass twice, each into an empty cache, one after the
other in this run: the previous flow (the script :data:`BEFORE`; the fit at
:data:`BEFORE_SHAPES`, synthesised shape by shape after the chip's modules), then the
current one; then the cached pass. Wall and CPU ratios of the two cold passes, and each
module's NAND2 change.

With ``--compare MODULE...``, instead: each named module synthesised with the script of
:mod:`hdl.area` and with the reference flow below (Yosys's default ``synth``: resource
sharing and ABC's default script), no cache: NAND2 equivalents and CPU seconds of each.

With ``--profile MODULE...`` (``all``: every emitted module), instead: each module alone,
one at a time, no cache: CPU seconds, cells, NAND2 equivalents, and the share of Yosys's
time of its costliest passes (from Yosys's time-stamped log) with the number of times each
ran (``opt`` repeats its passes until the design stops changing).

The load average is printed with each figure: the machine is shared, and synthesis is CPU
bound. Usage: PYTHONPATH=. python benchmarks/area.py [--chip trn2] [--cache DIR]
[--jobs N] [--before] [--compare MODULE... | --profile MODULE...|all] [--rtl DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import resource
import tempfile
import time
from pathlib import Path

from generators.area import FIT_SHAPES, chip_area, fit_sources
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


#: The script of hdl/area.py before ``opt`` after ``memory`` stopped running ``opt_dff``:
#: ``--before`` measures against it.
BEFORE = ("hierarchy -check -top {top}; proc; flatten; opt_expr; opt_clean; "
          "opt -nodffe -nosdff; fsm; opt; wreduce; peepopt; opt_clean; alumacc; opt; "
          "memory -nomap; opt_clean; opt -fast; opt; techmap; opt -fast; "
          "abc -script abc.script; opt -fast",
          "strash; &get -n; &dch -f; &nf; &put")
#: The fit's shapes before (three row counts, so two PEs), synthesised shape by shape
#: after the chip's modules, as the flow did.
BEFORE_SHAPES = tuple((r, c) for r in (8, 12, 16) for c in (8, 12, 16))


def before_and_after(doc, emitted, cache: Path, jobs: int | None) -> None:
    """Cold synthesis and roll-up of the chip with the fit, by the previous flow
    (:data:`BEFORE`, :data:`BEFORE_SHAPES`) and by the current one (each into an empty
    cache), one after the other in this run; then cached. Wall and Yosys CPU of each, their
    ratios, each module's NAND2 change; then, untimed, the current fit's terms against
    synthesis at the previous shapes it leaves out."""
    import generators.area as chip_areas

    now = area.SCRIPT, area.ABC_SCRIPT
    out = {}
    for label in ("before", "after"):
        area.SCRIPT, area.ABC_SCRIPT = BEFORE if label == "before" else now
        area.CACHE = cache / label
        cpu0, t0 = children_cpu(), time.perf_counter()
        if label == "before":
            _, summary = chip_area(doc.spec, emitted, synthesise=True, jobs=jobs, fit=False)
            chip_areas.FIT_SHAPES, shapes = BEFORE_SHAPES, FIT_SHAPES
            try:
                at = fit_sources(doc.spec)
            finally:
                chip_areas.FIT_SHAPES = shapes
            for group in at.values():
                area.synthesize(group, sram_bit=doc.spec.area.sram_bit, jobs=jobs)
        else:
            _, summary = chip_area(doc.spec, emitted, synthesise=True, jobs=jobs)
        out[label] = (time.perf_counter() - t0, children_cpu() - cpu0, summary)
        print(f"{doc.spec.name} cold with the fit, {label}: {out[label][0]:.1f} s wall, "
              f"{out[label][1]:.1f} s Yosys CPU, load average {os.getloadavg()[0]:.1f}; chip "
              f"{summary['chip']:,.0f} NAND2", flush=True)
    t0 = time.perf_counter()
    _, summary = chip_area(doc.spec, emitted, synthesise=True, jobs=jobs)
    print(f"{doc.spec.name} cached, after: {time.perf_counter() - t0:.2f} s; fit residuals "
          f"{[round(f['residual'], 4) for f in summary['fit']]}; terms {summary['terms']}")
    (w0, c0, s0), (w1, c1, s1) = out["before"], out["after"]
    print(f"after / before: wall {w1 / w0:.2f}, Yosys CPU {c1 / c0:.2f}, chip NAND2 "
          f"{100 * (s1['chip'] / s0['chip'] - 1):+.2f} %")
    for name, m in s0["modules"].items():
        if m["cells"]:
            new = s1["modules"][name]["gates"]
            print(f"  {name}: {m['gates']:,.0f} -> {new:,.0f} NAND2, "
                  f"{100 * (new / m['gates'] - 1):+.2f} %")
    chip_areas.FIT_SHAPES = tuple(s for s in BEFORE_SHAPES if s not in FIT_SHAPES)
    try:
        held = fit_sources(doc.spec)
    finally:
        chip_areas.FIT_SHAPES = shapes
    found = area.synthesize_groups(list(held.values()), sram_bit=doc.spec.area.sram_bit,
                                   jobs=jobs)
    for (rows, cols), known in zip(held, found, strict=True):
        synthesised = area.rollup(known, "tensor")
        fitted = area.array_area(summary["terms"], rows, cols)
        print(f"  held out {rows}x{cols}: fitted {fitted:,.0f}, synthesised "
              f"{synthesised:,.0f} NAND2, {100 * (fitted / synthesised - 1):+.2f} %")


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
    ap.add_argument("--before", action="store_true",
                    help="cold with the previous flow, then with the current one, then "
                         "cached")
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
        emitted = emitted_files(doc, tmp / "chip")
        if args.before:
            before_and_after(doc, emitted, args.cache or tmp / "cache", args.jobs)
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
