"""Every published inference row of ``explore/published/inference.csv`` predicted by ``gen
infer``: predicted, published, ratio and within tolerance for each figure (TTFT within 35 %,
the others within 25 %), a count per figure, and the rows not run with the reason. Prints the
tables benchmarks/infer.md quotes.

    PYTHONPATH=. PYTHONSAFEPATH=1 python benchmarks/infer_published.py [--write-gaps]

``--write-gaps`` rewrites ``tests/infer_published_gaps.json`` (the figures within tolerance
today, and every other figure pinned to its prediction) from this tree's predictions: run it
when a cost model change moves the predictions, and review the diff.
(``PYTHONSAFEPATH`` keeps ``benchmarks/explore.py`` from shadowing the ``explore`` package.)
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from explore import infer_published as ip

ROOT = Path(__file__).resolve().parents[1]
GAPS = ROOT / "tests" / "infer_published_gaps.json"
_LABEL = {"tokens_per_second": "tokens/s", "tpot": "TPOT", "ttft": "TTFT",
          "latency": "latency", "inferences_per_second": "inferences/s"}


def _fmt(figure: str, v: float) -> str:
    if figure in ("tpot", "ttft", "latency"):
        return f"{v * 1e3:,.4g} ms"
    return f"{v:,.1f}"


def gaps_document(compared: list[ip.Compared]) -> dict:
    """The pins file's content: ``within`` (key/figure names) and ``gaps`` (key/figure ->
    [predicted, published], four significant figures)."""
    return {"within": [f"{c.key}/{c.figure}" for c in compared if c.within],
            "gaps": {f"{c.key}/{c.figure}": [float(f"{c.predicted:.4g}"), c.published]
                     for c in compared if not c.within}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write-gaps", action="store_true",
                    help=f"rewrite {GAPS.relative_to(ROOT)} from this tree's predictions")
    args = ap.parse_args()
    rows = ip.load_rows()
    t0 = time.perf_counter()
    compared, _ = ip.compare(rows)
    took = time.perf_counter() - t0
    by_key = {r.key: r for r in rows}
    print("| row | command (`gen infer ...`) | figure | predicted | published | ratio | within |")
    print("|---|---|---|---|---|---|---|")
    last = None
    for c in compared:
        row = by_key[c.key]
        head = ("", "") if c.key == last else (
            f"{c.key} ({row.source})", f"`{row.command().removeprefix('gen infer ')}`")
        last = c.key
        print(f"| {head[0]} | {head[1]} | {_LABEL[c.figure]} | {_fmt(c.figure, c.predicted)} "
              f"| {_fmt(c.figure, c.published)} | {c.ratio:.2f} | "
              f"{'yes' if c.within else 'no'} |")
    print()
    run = sum(1 for r in rows if not r.skipped)
    print(f"{len(rows)} published rows, {run} run, {len(rows) - run} not run; "
          f"predicted in {took:.1f} s")
    print()
    print("| figure | tolerance | compared | within |")
    print("|---|---|---|---|")
    total, within = Counter(c.figure for c in compared), Counter(
        c.figure for c in compared if c.within)
    for f in ip.FIGURES:
        if total[f]:
            print(f"| {_LABEL[f]} | {ip.tolerance(f):.0%} | {total[f]} | {within[f]} |")
    print()
    reasons = Counter(r.skipped for r in rows if r.skipped)
    print("| rows not run | reason |")
    print("|---|---|")
    for reason, n in reasons.most_common():
        print(f"| {n} | {reason} |")
    if args.write_gaps:
        GAPS.write_text(json.dumps(gaps_document(compared), indent=1) + "\n")
        print(f"\nwrote {GAPS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
