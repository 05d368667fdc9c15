"""The exception family for bad input: everything the command line reports as one line.

:class:`InputError` is the base the CLI catches (one line on stderr, status 2): a spec, sweep
or workload file that cannot be accepted (:class:`SpecError`), or one that loads but cannot be
mapped onto a unit or a model (:class:`ModelError`). Anything else that escapes is a bug and
keeps its traceback.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Location:
    """Where a value stands: file, 1-based line and column."""

    file: Path | None
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        name = self.file.name if self.file is not None else "<spec>"
        if self.line is None:
            return name
        return f"{name}:{self.line}:{self.column or 1}"


class InputError(ValueError):
    """Input the tools cannot work with; the message is one line that says why."""


class SpecError(InputError):
    """A spec that cannot be accepted.

    The message is one line: ``file:line:col: key.path: expected ..., found ...`` followed by the
    legal choices or the nearest known key where there are any.
    """

    def __init__(self, message: str, *, location: Location | None = None, path: str = "",
                 expected: str | None = None, found: object = None,
                 choices: list[str] | tuple[str, ...] = (), nearest: str | None = None):
        self.location = location
        self.path = path
        self.expected = expected
        self.found = found
        self.choices = tuple(choices)
        self.nearest = nearest
        self.detail = message
        super().__init__(self._render())

    def _render(self) -> str:
        parts = []
        if self.location is not None:
            parts.append(f"{self.location}:")
        if self.path:
            parts.append(f"{self.path}:")
        parts.append(self.detail)
        text = " ".join(parts)
        if self.nearest:
            text += f"; did you mean {self.nearest!r}?"
        if self.choices:
            shown = ", ".join(self.choices[:24]) + (", ..." if len(self.choices) > 24 else "")
            text += f" (legal: {shown})"
        return text


def nearest(word: str, choices) -> str | None:
    match = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return match[0] if match else None


class ModelError(InputError):
    """A spec that loads but cannot be mapped onto a unit or a model (message: what and why)."""
