"""Verilator's coverage counts (``coverage.dat``, written by a run inside
:func:`sim.tb.runner.collecting_coverage`), merged across runs and builds, and reported per
module.

A point is one thing Verilator counts: a statement block or an if/else/case branch (kind
``line``; it covers the source lines of its range) or one bit's rise or fall (``toggle``).
Points are merged by module, source file, position, kind and what they name, so that every
instance of a module and every run of a build add to one count; the same module built from
two texts (the core's vector lane and the standalone vector unit's) is reported as two
sources of that module. A point is covered when its count is not zero.

:func:`write_report` writes ``index.html`` (every module's line and toggle coverage), one
page per module (its source with each line's count, the toggles never seen) and one text
file per module of what is not covered (``<module>.uncovered.txt``: ``file:line: text`` and
``file:line: signal[bit] 0->1``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from specs.files import replace_atomically

__all__ = ["ModuleCoverage", "Point", "merge", "read", "summarise", "write_report"]

#: Verilator's escape of a character in a name: ``__0`` and its code in hex (``$`` is
#: ``__024``).
_ESCAPE = re.compile(r"__0([0-9a-fA-F]{2})")
#: What Yosys' Verilog backend adds to every module with combinational blocks: a trigger
#: register that runs them once at time 0. Not the design's logic: its points (its toggles,
#: and the blocks on a line that names it) are left out.
BACKEND_TRIGGER = "$auto$verilog_backend"


@dataclass(frozen=True, order=True)
class Point:
    """One counted point: ``kind`` "line" (a block or a branch, ``lines`` the source lines
    it covers) or "toggle" (``name``: ``signal[bit]:0->1``)."""

    module: str
    file: str
    line: int
    column: int
    kind: str
    name: str
    lines: tuple[int, ...]


def _fields(text: str) -> dict[str, str]:
    return dict(item.split("\x02", 1) for item in text.split("\x01") if "\x02" in item)


def read(path: Path) -> dict[Point, int]:
    """The points of one ``coverage.dat`` and their counts (instances summed)."""
    counts: dict[Point, int] = {}
    sources: dict[str, list[str]] = {}
    for row in Path(path).read_text(errors="replace").splitlines():
        if not row.startswith("C '"):
            continue
        body, _, count = row[3:].rpartition("' ")
        f = _fields(body)
        kind = "toggle" if f.get("t") == "toggle" else "line"
        module = f.get("page", "").partition("/")[2] or f.get("h", "?")
        first = int(f.get("l", 0))
        lines: list[int] = []
        for item in f.get("S", str(first)).split(","):
            lo, _, hi = item.partition("-")
            if lo.isdigit():
                lines.extend(range(int(lo), int(hi if hi.isdigit() else lo) + 1))
        name = _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), f.get("o", ""))
        file = f.get("f", "?")
        if file not in sources:
            try:
                sources[file] = Path(file).read_text(errors="replace").splitlines()
            except OSError:
                sources[file] = []
        text = sources[file][first - 1] if 0 < first <= len(sources[file]) else ""
        if BACKEND_TRIGGER in name or BACKEND_TRIGGER in text:
            continue
        point = Point(module, file, first, int(f.get("n", 0)), kind, name,
                      tuple(lines or [first]))
        counts[point] = counts.get(point, 0) + int(count)
    return counts


def merge(paths: Iterable[Path]) -> dict[Point, int]:
    """The points of several ``coverage.dat`` files, their counts summed."""
    total: dict[Point, int] = {}
    for path in paths:
        for point, count in read(path).items():
            total[point] = total.get(point, 0) + count
    return total


@dataclass
class ModuleCoverage:
    """One module's points: covered and total of each kind, and those not covered."""

    module: str
    lines: list[int] = field(default_factory=lambda: [0, 0])
    toggles: list[int] = field(default_factory=lambda: [0, 0])
    uncovered: list[Point] = field(default_factory=list)

    @staticmethod
    def percent(pair: list[int]) -> float | None:
        return 100.0 * pair[0] / pair[1] if pair[1] else None


def summarise(points: Mapping[Point, int]) -> dict[str, ModuleCoverage]:
    """Per module (by name, in order), its coverage."""
    out: dict[str, ModuleCoverage] = {}
    for point in sorted(points):
        cov = out.setdefault(point.module, ModuleCoverage(point.module))
        pair = cov.toggles if point.kind == "toggle" else cov.lines
        pair[1] += 1
        if points[point]:
            pair[0] += 1
        else:
            cov.uncovered.append(point)
    return out


def _source(file: str, module: str) -> list[tuple[int, str]]:
    """``module``'s lines in ``file`` (number, text), or none when the file is gone."""
    try:
        text = Path(file).read_text(errors="replace").splitlines()
    except OSError:
        return []
    head = re.compile(rf"^module \\?{re.escape(module)}\s*\(")
    for i, row in enumerate(text):
        if head.match(row):
            end = next((j for j in range(i, len(text)) if text[j].startswith("endmodule")),
                       len(text) - 1)
            return [(j + 1, text[j]) for j in range(i, end + 1)]
    return []


def _cell(pair: list[int]) -> str:
    share = ModuleCoverage.percent(pair)
    return "-" if share is None else f"{pair[0]:,}/{pair[1]:,} ({share:.1f} %)"


def _page(module: str, points: Mapping[Point, int]) -> str:
    mine = {p: c for p, c in points.items() if p.module == module}
    parts = [f"<h1>{html.escape(module)}</h1>", '<p><a href="index.html">all modules</a></p>']
    for file in sorted({p.file for p in mine}):
        hits: dict[int, int] = {}
        for p, c in mine.items():
            if p.file == file and p.kind == "line":
                for n in p.lines:
                    hits[n] = max(hits.get(n, c), c)
        parts.append(f"<h2>{html.escape(file)}</h2><pre>")
        for n, text in _source(file, module):
            count = hits.get(n)
            style = "" if count is None else (' class="hit"' if count else ' class="miss"')
            label = "" if count is None else f"{count:,}"
            parts.append(f'<span{style}>{n:6d} {label:>10} {html.escape(text)}</span>')
        parts.append("</pre>")
        missed = sorted(p for p, c in mine.items()
                        if p.file == file and p.kind == "toggle" and not c)
        if missed:
            parts.append(f"<h3>toggles never seen ({len(missed):,})</h3><pre>")
            parts.extend(f"{p.line:6d} {html.escape(p.name)}" for p in missed)
            parts.append("</pre>")
    return _html(module, "\n".join(parts))


def _html(title: str, body: str) -> str:
    return ("<!doctype html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>coverage: {html.escape(title)}</title><style>"
            "body{font-family:sans-serif} pre{font-size:12px} .hit{background:#dfd}"
            " .miss{background:#fcc} td,th{padding:2px 8px;text-align:right}"
            " td:first-child{text-align:left}</style></head>\n"
            f"<body>\n{body}\n</body></html>\n")


def _file_name(module: str) -> str:
    return re.sub(r"[^\w.-]", "_", module)


def _uncovered_text(cov: ModuleCoverage) -> str:
    rows = []
    for p in cov.uncovered:
        if p.kind == "toggle":
            rows.append(f"{p.file}:{p.line}: {p.name}")
        else:
            text = dict(_source(p.file, p.module)).get(p.line, "").strip()
            rows.append(f"{p.file}:{p.line}: {p.name} {text}".rstrip())
    return "".join(f"{r}\n" for r in rows)


def write_report(points: Mapping[Point, int], out: Path) -> dict[str, ModuleCoverage]:
    """Write the report of ``points`` into the directory ``out`` (each file whole or not
    at all) and return the per-module summary."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarise(points)
    rows = []
    for module, cov in summary.items():
        name = _file_name(module)
        replace_atomically(out / f"{name}.html",
                           lambda tmp, m=module: tmp.write_text(_page(m, points)))
        replace_atomically(out / f"{name}.uncovered.txt",
                           lambda tmp, c=cov: tmp.write_text(_uncovered_text(c)))
        rows.append(f'<tr><td><a href="{html.escape(name)}.html">{html.escape(module)}</a></td>'
                    f"<td>{_cell(cov.lines)}</td><td>{_cell(cov.toggles)}</td></tr>")
    table = ("<h1>coverage</h1><table><tr><th>module</th><th>lines</th><th>toggles</th></tr>"
             + "".join(rows) + "</table>")
    replace_atomically(out / "index.html", lambda tmp: tmp.write_text(_html("all", table)))
    return summary
