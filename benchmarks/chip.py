"""`gen chip` end to end, and the emission of each large unit, at full scale.

Each measurement runs in a fresh Python process (imports included), into a new temporary
directory: wall time, CPU time (user + system, of the process and of its worker processes),
and the peak resident memory of the largest process. Configurations alternate within each
round, so that they share the machine's load; the load average is printed with each figure.

* ``chip``: ``generators.chip.generate_chip`` of the spec (what ``gen chip SPEC`` runs), with
  each ``--jobs`` value, and, with ``--baseline TREE``, the same in a source tree of another
  revision (``git archive REV | tar -x -C TREE``; its own default ``jobs``, if it has any).
  Each run of this tree has a store of emissions of its own (``TRNGEN_CACHE``): ``cold`` runs
  find no emitted unit there (every unit is emitted; the CPU seconds the units took in an
  earlier round, which order the workers' tasks, are kept), and a ``warm`` run follows each
  cold one, with what it stored.
* ``units``: one unit's emission alone (``--units tensor,scalar,vector``), as ``gen chip``
  runs it in a worker (``generators.chip._emit``; in a baseline tree without it, the unit's
  ``emit``), with an empty store: the whole process, and the emission's own CPU time
  (imports excluded).

With ``--empty``, every cold run (this tree's and the baseline's) starts from an empty store
instead, no recorded seconds kept (as a first ``gen chip`` on a machine), and with
``--empty-wasm`` also from an empty cache of wasmtime (``XDG_CACHE_HOME``), which otherwise
keeps Yosys's WebAssembly compiled from one run to the next.

The files written with each ``--jobs`` value, cold and warm, are compared (their manifests
must be equal), and with the baseline's when ``--same-as-baseline`` is given.

Usage: PYTHONPATH=. python benchmarks/chip.py [--spec trn2.yaml] [--runs 3] [--jobs 1,2]
[--baseline TREE] [--same-as-baseline] [--empty [--empty-wasm]] [--units tensor,scalar,vector]
[--skip chip|units]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

CHIP = """
import sys
from pathlib import Path
from generators.chip import generate_chip
from specs.loader import load_document
jobs = {jobs!r}
kwargs = {{}} if jobs is None else {{"jobs": jobs}}
generate_chip(load_document({spec!r}), Path(sys.argv[1]), "full", **kwargs)
"""

UNIT = """
import sys
import time
from pathlib import Path
from generators.units import UNITS
from specs.loader import load_document
try:
    from generators.chip import _emit
except ImportError:
    def _emit(name, params, rtl, head):
        return UNITS[name].emit(params, rtl, head)
doc = load_document({spec!r})
(params,) = UNITS[{unit!r}].params(doc.spec, "full")
start = time.process_time()
files = _emit({unit!r}, params, Path(sys.argv[1]), "")
print(f"{{time.process_time() - start:.2f}}")
print(sum(p.stat().st_size for p in files if p.suffix == ".v"))
"""


#: Appended to each measured program: its CPU time and peak memory, with its workers'
#: (reaped by then), as the last line of its output.
USAGE = """
import json, resource
me, workers = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
print(json.dumps({"cpu": me.ru_utime + me.ru_stime + workers.ru_utime + workers.ru_stime,
                  "rss": max(me.ru_maxrss, workers.ru_maxrss)}))
"""


def run(code: str, tree: Path, out: Path, store: Path, wasm: Path | None = None) -> dict:
    """``code`` in a child process of the source tree ``tree``, with the trngen cache
    ``store`` (and ``wasm`` as its ``XDG_CACHE_HOME``, where given): wall, CPU and peak
    RSS."""
    import json

    env = dict(os.environ, PYTHONPATH=str(tree), TRNGEN_CACHE=str(store))
    if wasm is not None:
        env["XDG_CACHE_HOME"] = str(wasm)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code + USAGE, str(out)], cwd=tree, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{tree}: {proc.stderr[-2000:]}")
    *lines, usage = proc.stdout.strip().splitlines()
    return {"wall": wall, "load": load, "lines": lines, **json.loads(usage)}


def show(label: str, f: dict) -> None:
    rss = f"{f['rss'] / 1024:.0f} MiB"  # ru_maxrss is in KiB on Linux
    emission, size = f["lines"] if f["lines"] else ("-", "-")
    if emission != "-":
        emission, size = f"{emission} s", f"{int(size):,}"
    print(f"| {label} | {f['wall']:.1f} s | {f['cpu']:.1f} s | {emission} | {rss} | {size} "
          f"| {f['load']:.1f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="trn2.yaml")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", default="1,2")
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--units", default="tensor,scalar,vector")
    parser.add_argument("--skip", default="")
    parser.add_argument("--same-as-baseline", action="store_true")
    parser.add_argument("--empty", action="store_true")
    parser.add_argument("--empty-wasm", action="store_true")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    trees = [("this tree", HERE)] + ([("baseline", args.baseline.resolve())]
                                     if args.baseline else [])
    print("| what | wall | CPU (user + sys) | of it, the emission's CPU | peak RSS, largest "
          "process | bytes of Verilog | load |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)

        def cold(store: Path) -> Path:
            """``store`` without its emitted units (their recorded seconds kept, unless
            ``--empty``)."""
            for entry in (store / "chip").glob("*"):
                if entry.name != "seconds" or args.empty:
                    shutil.rmtree(entry)
            return store

        def wasm(name: str) -> Path | None:
            """An empty cache of wasmtime for one run, with ``--empty-wasm``."""
            return Path(tempfile.mkdtemp(prefix=name, dir=tmp)) if args.empty_wasm else None

        for r in range(args.runs):
            if "chip" not in skip:
                manifests = set()
                for jobs in [int(j) for j in args.jobs.split(",") if j]:
                    store = tmp / f"store-{jobs}"
                    for state in ("cold", "warm"):
                        out = tmp / f"chip-{r}-{jobs}-{state}"
                        show(f"gen chip {args.spec}, jobs {jobs}, {state}",
                             run(CHIP.format(spec=args.spec, jobs=jobs), HERE, out,
                                 cold(store) if state == "cold" else store,
                                 wasm("wasm-") if state == "cold" else None))
                        manifests.add((out / "manifest.json").read_text())
                if args.baseline:
                    out = tmp / f"chip-{r}-base"
                    show(f"gen chip {args.spec}, baseline",
                         run(CHIP.format(spec=args.spec, jobs=None), args.baseline.resolve(),
                             out, cold(tmp / "store-base") if args.empty else tmp / "store-base",
                             wasm("wasm-base-")))
                    if args.same_as_baseline:
                        manifests.add((out / "manifest.json").read_text())
                if len(manifests) > 1:
                    raise SystemExit("the builds differ")
            if "units" not in skip:
                for unit in filter(None, args.units.split(",")):
                    for label, tree in trees:
                        store = tmp / f"unit-{unit}-{r}-{label.replace(' ', '')}"
                        show(f"{unit} emission, {label}",
                             run(UNIT.format(spec=args.spec, unit=unit), tree,
                                 tmp / f"{unit}-{r}-{label.replace(' ', '')}", store))


if __name__ == "__main__":
    main()
