"""Area from synthesis: time to synthesise and roll up every module `gen chip` emits for a chip.

1. Emit the chip's RTL (full scale) into a temporary directory, without synthesis.
2. First pass: synthesise every emitted module into the cache (an empty one unless
   ``--cache`` names one: then this pass is cold) and roll up engine, core and chip
   (``generators.area.chip_area``): wall time, and the CPU time of the Yosys processes.
3. Second pass: the same again on the filled cache.

With ``--compare MODULE...``, instead: each named module synthesised flattened (its parts
with it) with the script of :mod:`hdl.area` and with the reference flow below (Yosys's
default ``synth``: resource sharing and ABC's default script), no cache: NAND2 equivalents
and CPU seconds of each.

With ``--flat MODULE...`` (``all``: every emitted module), instead: each module as
:func:`hdl.area.synthesize` does it (its parts apart, each distinct one once) and flattened
into one module as before, same script, no cache: NAND2 equivalents and CPU seconds.

The load average is printed with each figure: the machine is shared, and synthesis is CPU
bound. Usage: PYTHONPATH=. python benchmarks/area.py [--chip trn2] [--cache DIR]
[--jobs N]
[--compare MODULE... | --flat MODULE...|all] [--rtl DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
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
        if unit.unsupported(doc.spec):
            continue
        for params in unit.params(doc.spec, "full"):
            files = unit.emit(params, rtl, "")
            if unit.area:  # not the core: it assembles the engines the others count
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
