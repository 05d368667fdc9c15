"""`gen check`'s reports as text: a rich table, JSON, Markdown or HTML.

:mod:`sim.system.check` computes the rows; this module only lays them out. The Markdown and
HTML come from the templates ``check.md.j2`` and ``check.html.j2`` beside the datasheets'.
"""

from __future__ import annotations

import json

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from sim.system.check import FIELDS, VERDICTS, Report, Row
from specs.console import console as whole_console
from specs.loader import sources

from ..templates import DIRECTORY

__all__ = ["render", "to_html", "to_json", "to_markdown", "to_table"]


#: Rich style of each verdict in the table.
STYLE = {"agrees": "green", "disagrees": "bold red", "not modelled": "yellow",
         "derived": "dim"}
#: Columns of figures, right-aligned.
FIGURES = ("derived", "claimed", "difference")


def _env(autoescape: bool) -> Environment:
    env = Environment(loader=FileSystemLoader(DIRECTORY), undefined=StrictUndefined,
                      autoescape=autoescape, trim_blocks=True, lstrip_blocks=True,
                      keep_trailing_newline=True)
    env.filters["md"] = lambda s: str(s).replace("|", "\\|")
    return env


def _context(reports: list[Report]) -> dict:
    known = sources()
    cited = sorted({r.source for rep in reports for r in rep.rows if r.source})
    return {"reports": reports, "fields": FIELDS, "verdicts": VERDICTS,
            "sources": [(key, known[key]) for key in cited if key in known]}


def _row_json(row: Row) -> dict:
    """The row's fields for JSON: figures as text with their unit, difference a number."""
    out = {f: (row.text(f) or None) for f in FIELDS}
    out["difference"] = row.difference
    return out


def to_json(reports: list[Report]) -> str:
    return json.dumps([{"spec": rep.spec, "rows": [_row_json(r) for r in rep.rows]}
                       for rep in reports], indent=2, ensure_ascii=False) + "\n"


def to_markdown(reports: list[Report]) -> str:
    return _env(autoescape=False).get_template("check.md.j2").render(**_context(reports))


def to_html(reports: list[Report]) -> str:
    return _env(autoescape=True).get_template("check.html.j2").render(**_context(reports))


def to_table(reports: list[Report], console: Console | None = None) -> None:
    """Print the reports as rich tables on ``console`` (default: :func:`specs.console.console`);
    a cell that does not fit wraps, none is cut, and none is read as markup."""
    console = console or whole_console()
    for rep in reports:
        table = Table(title=escape(f"{rep.title} ({rep.spec})"), title_justify="left")
        for f in FIELDS:
            table.add_column(f, overflow="fold", justify="right" if f in FIGURES else "left")
        for r in rep.rows:
            table.add_row(*(Text(r.text(f)) for f in FIELDS[:-1]),
                          Text.assemble((r.verdict, STYLE[r.verdict])))
        console.print(table)
        console.print(", ".join(f"{rep.count(v)} {v}" for v in VERDICTS))


def render(reports: list[Report], fmt: str) -> str:
    """The reports as text in ``fmt`` (json, md or html)."""
    if fmt == "json":
        return to_json(reports)
    if fmt == "md":
        return to_markdown(reports)
    if fmt == "html":
        return to_html(reports)
    raise ValueError(f"fmt must be one of json, md, html, not {fmt!r}")
