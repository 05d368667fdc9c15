"""Area from synthesis: time to synthesise and roll up every module `gen chip` emits for a chip.

1. Emit the chip's RTL (full scale) into a temporary directory, without synthesis.
2. First pass: synthesise every emitted module into the cache (an empty one unless
   ``--cache`` names one: then this pass is cold) and roll up engine, core and chip
   (``generators.area.chip_area``): wall time, and the CPU time of the Yosys processes.
3. Second pass: the same again on the filled cache.

With ``--before``, instead: the cold pass twice, with the script of :mod:`hdl.area` before
its departures for time (:data:`BEFORE`) and with the current one, then the cached pass:
wall and CPU ratios of the two cold passes, and each module's NAND2 change.

With ``--compare MODULE...``, instead: each named module synthesised flattened (its parts
with it) with the script of :mod:`hdl.area` and with the reference flow below (Yosys's
default ``synth``: resource sharing and ABC's default script), no cache: NAND2 equivalents
and CPU seconds of each.

With ``--flat MODULE...`` (``all``: every emitted module), instead: each module as
:func:`hdl.area.synthesize` does it (its parts apart, each distinct one once) and flattened
into one module as before, same script, no cache: NAND2 equivalents and CPU seconds.

The load average is printed with each figure: the machine is shared, and synthesis is CPU
bound. Usage: PYTHONPATH=. python benchmarks/area.py [--chip trn2] [--cache DIR]
[--jobs N] [--before]
[--compare MODULE... | --flat MODULE...|all] [--rtl DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from generators.area import FIT_SHAPES, chip_area, fit_samples
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


def flat_against_parts(rtl: Path, modules: list[str], sram_bit: float) -> None:
    """Each named module (all emitted ones for ``all``) synthesised as the flow of
    hdl/area.py did before it synthesised parts apart: the file flattened into one module."""
    sources = {p.stem: p.read_text() for p in sorted(rtl.glob("*.v"))}
    names = list(sources) if modules == ["all"] else modules
    def below(top: str) -> dict[str, str]:
        """The modules ``top`` instantiates, and theirs."""
        found, todo = {}, [top]
        while todo:
            for n, t in sources.items():
                if n not in found and n != top and area._mentions(sources[todo[-1]], n):
                    found[n] = t
                    todo.insert(0, n)
            todo.pop()
        return found

    split = area.SPLIT_ABOVE
    for top in names:
        libs = below(top)
        if area.structural_children(sources[top], libs) is not None:
            continue
        with tempfile.TemporaryDirectory() as cache:
            # its children first, untimed
            area.synthesize(libs, sram_bit=sram_bit, cache=Path(cache), jobs=1)
            area.SPLIT_ABOVE = 0  # this module's parts apart, whatever its size
            cpu0 = children_cpu()
            parts = area.synthesize({top: sources[top], **libs}, sram_bit=sram_bit,
                                    cache=Path(cache), jobs=1)
            parts_cpu = children_cpu() - cpu0
            area.SPLIT_ABOVE = split
        cpu0 = children_cpu()
        stat = area._run(top, sources[top], libs)
        flat_cpu = children_cpu() - cpu0
        by_type = stat["modules"].get(f"\\{top}", stat["design"])["num_cells_by_type"]
        cells = {c: n for c, n in by_type.items() if c != "$mem_v2" and c not in sources}
        flat = area.ModuleArea(top, cells, stat["memory_bits"], sram_bit=sram_bit).gates
        new = parts[top].gates
        print(f"{top}: parts apart {new:,.0f} NAND2 in {parts_cpu:.1f} s CPU; flattened "
              f"{flat:,.0f} NAND2 in {flat_cpu:.1f} s CPU; "
              f"{100 * (new / flat - 1):+.2f} %; load average {os.getloadavg()[0]:.1f}",
              flush=True)


#: The script of hdl/area.py before its departures for time (``synth -flatten -noshare``
#: with its checks and ``opt -full``, ABC with ``dc2``): ``--before`` measures against it.
BEFORE = ("synth -flatten -noshare -top {top} -run :fine; opt -fast -full; opt -full; "
          "techmap; opt -fast; abc -script abc.script; opt -fast",
          "strash; dc2; &get -n; &dch -f; &nf; &put")


def before_and_after(doc, emitted, cache: Path, jobs: int | None) -> None:
    """Cold synthesis and roll-up of the chip with :data:`BEFORE`'s script, then with the
    current one (each into an empty cache), one after the other in this run; then cached.
    Wall and Yosys CPU of each, their ratios, and each module's NAND2 change."""
    now = area.SCRIPT, area.ABC_SCRIPT
    out = {}
    for label, (script, abc) in (("before", BEFORE), ("after", now)):
        area.SCRIPT, area.ABC_SCRIPT = script, abc
        area.CACHE = cache / label
        cpu0, t0 = children_cpu(), time.perf_counter()
        _, summary = chip_area(doc.spec, emitted, synthesise=True, jobs=jobs, fit=False)
        out[label] = (time.perf_counter() - t0, children_cpu() - cpu0, summary)
        print(f"{doc.spec.name} cold, {label}: {out[label][0]:.1f} s wall, "
              f"{out[label][1]:.1f} s Yosys CPU, load average {os.getloadavg()[0]:.1f}; chip "
              f"{summary['chip']:,.0f} NAND2", flush=True)
    t0 = time.perf_counter()
    chip_area(doc.spec, emitted, synthesise=True, jobs=jobs, fit=False)
    print(f"{doc.spec.name} cached, after: {time.perf_counter() - t0:.2f} s")
    cpu0, t0 = children_cpu(), time.perf_counter()
    samples = fit_samples(doc.spec, True, jobs)
    print(f"{doc.spec.name} the array at {len(FIT_SHAPES)} more shapes (the fit's), cold, "
          f"after: {time.perf_counter() - t0:.1f} s wall, {children_cpu() - cpu0:.1f} s Yosys "
          f"CPU, load average {os.getloadavg()[0]:.1f}; NAND2 {samples}", flush=True)
    t0 = time.perf_counter()
    _, summary = chip_area(doc.spec, emitted, synthesise=True, jobs=jobs)
    print(f"{doc.spec.name} cached with the fit: {time.perf_counter() - t0:.2f} s; residuals "
          f"{[round(f['residual'], 4) for f in summary['fit']]}; terms {summary['terms']}")
    (w0, c0, s0), (w1, c1, s1) = out["before"], out["after"]
    print(f"after / before: wall {w1 / w0:.2f}, Yosys CPU {c1 / c0:.2f}, chip NAND2 "
          f"{100 * (s1['chip'] / s0['chip'] - 1):+.2f} %")
    for name, m in s0["modules"].items():
        if m["cells"]:
            new = s1["modules"][name]["gates"]
            print(f"  {name}: {m['gates']:,.0f} -> {new:,.0f} NAND2, "
                  f"{100 * (new / m['gates'] - 1):+.2f} %")


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chip", default="trn2")
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--compare", nargs="+", metavar="MODULE", default=None)
    ap.add_argument("--flat", nargs="+", metavar="MODULE", default=None,
                    help="each module with its parts apart and flattened (all: every one)")
    ap.add_argument("--jobs", type=int, default=None, help="modules synthesised at once")
    ap.add_argument("--before", action="store_true",
                    help="cold with the script before its departures for time, then with the "
                         "current one, then cached")
    ap.add_argument("--rtl", type=Path, default=None,
                    help="with --compare: RTL already emitted by gen chip (its rtl/ folder)")
    args = ap.parse_args()
    doc = load_document(args.chip)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.compare or args.flat:
            if args.rtl is None:
                emitted_files(doc, tmp / "chip")
            if args.compare:
                compare(args.rtl or tmp / "chip" / "rtl", args.compare, doc.spec.area.sram_bit)
            else:
                flat_against_parts(args.rtl or tmp / "chip" / "rtl", args.flat,
                                   doc.spec.area.sram_bit)
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
