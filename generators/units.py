"""The hardware units `gen chip` emits and `gen sim` runs, and how each is parameterised
from a chip spec. A unit never reads the spec itself: its ``params`` function here maps the
spec to the unit's own small parameter object."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from specs.model import ChipSpec


@dataclass(frozen=True)
class Unit:
    name: str
    #: (spec, "full" | "sim") -> parameter objects to emit (one per variant)
    params: Callable[[ChipSpec, str], Iterable[object]]
    #: (params, rtl_dir, header) -> files written
    emit: Callable[[object, Path, str], list[Path]]
    #: (params, simulator, seed) -> RunResult or a list of them
    simulate: Callable[..., object]
    #: spec -> reason the chip has no such unit, or "" when it has
    unsupported: Callable[[ChipSpec], str] = lambda spec: ""
    #: spec -> datasheet tables (dicts with title, columns, rows, note)
    datasheet: Callable[[ChipSpec], list[dict]] | None = None


UNITS: dict[str, Unit] = {}
