"""Area from synthesis: time to synthesise and roll up every module `gen chip` emits for a chip.

1. Emit the chip's RTL (full scale) into a temporary directory, without synthesis.
2. First pass: synthesise every emitted module into the cache (an empty one unless
   ``--cache`` names one: then this pass is cold) and roll up engine, core and chip
   (``generators.area.chip_area``): wall time, and the CPU time of the Yosys processes.
3. Second pass: the same again on the filled cache.

The load average is printed with each figure: the machine is shared, and synthesis is CPU
bound. Usage: PYTHONPATH=. python benchmarks/area.py [--chip trn2] [--cache DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from generators.area import chip_area
from generators.chip import generate_chip
from generators.units import UNITS
from hdl import area
from specs.loader import load_document


def emitted_files(doc, out: Path) -> dict[str, list[list[Path]]]:
    generate_chip(doc, out)
    rtl = out / "rtl"
    emitted: dict[str, list[list[Path]]] = {}
    for name, unit in UNITS.items():
        if unit.unsupported(doc.spec):
            continue
        for params in unit.params(doc.spec, "full"):
            files = unit.emit(params, rtl, "")
            emitted.setdefault(name, []).append([rtl / p.name for p in files])
    return emitted


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chip", default="trn2")
    ap.add_argument("--cache", type=Path, default=None)
    args = ap.parse_args()
    doc = load_document(args.chip)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        emitted = emitted_files(doc, tmp / "chip")
        modules = sum(1 for g in emitted.values() for f in g for p in f if p.suffix == ".v")
        area.CACHE = args.cache or tmp / "cache"
        for label in ("first pass", "second pass"):
            cpu0, t0 = children_cpu(), time.perf_counter()
            _, summary = chip_area(doc.spec, emitted, synthesise=True)
            wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
            print(f"{args.chip} {label}: {modules} modules, {wall:.2f} s wall, {cpu:.1f} s "
                  f"Yosys CPU, load average {os.getloadavg()[0]:.1f}; chip "
                  f"{summary['chip']:,.0f} NAND2, core {summary['core']:,.0f}")


if __name__ == "__main__":
    main()
