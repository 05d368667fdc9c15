"""The console the command lines print their tables to, so that no cell is ever cut.

On a terminal a table takes the terminal's width and its columns, made with
``overflow="fold"``, wrap a cell that does not fit onto more lines. Anywhere else (a pipe, a
file, a log) the console has no width limit: each table is as wide as its widest cells and
every line reads whole, whatever ``COLUMNS`` says and even when colours are forced
(``FORCE_COLOR``), which makes rich take a pipe for a terminal. Text is printed as it is
given: rich markup is not read, so ``x[label]`` in a cell or a title stays ``x[label]``.
"""

from __future__ import annotations

import sys

from rich.console import Console

__all__ = ["UNBOUNDED", "console"]

#: The width of a console that is not a terminal: no table or line is ever that wide.
UNBOUNDED = sys.maxsize


def console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr) as the module docstring describes, with neither
    markup nor highlighting."""
    out = Console(stderr=stderr, markup=False, highlight=False)
    isatty = getattr(out.file, "isatty", None)
    try:
        terminal = bool(isatty and isatty())
    except ValueError:  # a closed file
        terminal = False
    if not terminal:
        out.width = UNBOUNDED
    return out
