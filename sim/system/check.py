"""Every derived figure beside every published claim, at every level of a spec.

A row says at which level a quantity is, what the model derives, what a source claims, the
relative difference ``(derived - claimed) / claimed`` and a verdict:

- ``agrees``: within the claim's tolerance;
- ``disagrees``: outside it (a contradiction between the sources and the model, or between
  sources; every one is shown, none is smoothed over);
- ``not modelled``: a claim the model does not derive (a process node, a marketing ratio, or a
  figure of a level or format the spec does not have);
- ``derived``: a figure the model derives that no source claims.

Checking a system covers the chips and the members inside it: the claims of every spec in the
tree are laid beside the figures of the model of the spec that makes them (so a system's claim
about its chips meets the chip as that system configures it, e.g. with its own NeuronLink
bandwidth).

This module computes the rows; :mod:`generators.cli.checkreport` lays them out as text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pint

from specs import units
from specs.loader import load_document
from specs.model import Claim
from specs.quantities import QUANTITIES

from . import collectives, execute
from .model import COLLECTIVE_BYTES, EXTRA_QUANTITIES, LEVELS, Chip, System, build

__all__ = ["FIELDS", "VERDICTS", "Report", "Row", "check", "rows"]

FIELDS = ("level", "quantity", "derived", "claimed", "source", "difference", "verdict")
VERDICTS = ("agrees", "disagrees", "not modelled", "derived")

#: The executed collectives laid beside the formula's (:mod:`sim.system.execute`).
EXECUTED = {f"collective.{op}.executed": op for op in collectives.OPS}
#: Chunk of the executed collectives in the check: large, so that the check stays quick
#: (benchmarks/collectives.md: 4 MiB chunks give a time within 0.3 % of this one).
CHECK_CHUNK = 64 * 2**20

_ORDER = {name: i for i, name in enumerate([*QUANTITIES, *EXTRA_QUANTITIES, *EXECUTED])}

#: Display units by dimension, smallest first; a figure is shown in the largest whose
#: magnitude is at least 1.
_UNITS = {
    "compute": ("GFLOPS", "TFLOPS", "PFLOPS", "EFLOPS"),
    "bytes": ("KiB", "MiB", "GiB", "TiB", "PiB"),
    "frequency": ("MHz", "GHz"),
    "time": ("us", "ms", "s"),
}


@dataclass(frozen=True)
class Row:
    """One line of the check (see the module docstring); ``spec`` and ``note`` say where a
    claim was made and in what words."""

    level: str
    quantity: str
    derived: pint.Quantity | float | None
    claimed: pint.Quantity | float | None
    source: str | None
    difference: float | None
    verdict: str
    spec: str = ""
    note: str = ""

    @property
    def unit(self) -> str | None:
        """The unit both figures are shown in: the claim's, else one chosen by magnitude."""
        if isinstance(self.claimed, pint.Quantity):
            return f"{self.claimed.units:~}"
        if isinstance(self.derived, pint.Quantity):
            return _auto_unit(self.derived, self.quantity)
        return None

    def text(self, name: str) -> str:
        """A field as display text ('' for none)."""
        value = getattr(self, name)
        if value is None:
            return ""
        if name == "difference":
            return f"{value:+.1%}"
        if name in ("derived", "claimed"):
            return _show(value, self.unit)
        return str(value)


def _auto_unit(q: pint.Quantity, quantity: str) -> str:
    """The figure's own unit when it reads well (1 to 9,999), else the best of a ladder."""
    own = f"{q.units:~}"
    dim = units.dimension_of(q)
    if dim == "bandwidth":
        if own.endswith("ps"):
            choices = ("Gbps", "Tbps", "Pbps")
        else:
            choices = ("GiB/s", "TiB/s", "PiB/s") if "iB" in own else ("GB/s", "TB/s", "PB/s")
    elif dim == "compute" and quantity == "compute.int8":
        choices = ("GOPS", "TOPS", "POPS", "EOPS")
    else:
        choices = _UNITS.get(dim, ())
    if not choices or (own in choices and 1 <= abs(q.magnitude) < 10_000):
        return own
    best = choices[0]
    for unit in choices:
        if abs(q.to(unit).magnitude) >= 1:
            best = unit
    return best


def _show(value, unit: str | None) -> str:
    if isinstance(value, pint.Quantity):
        q = value.to(unit) if unit else value
        return units.show(q, digits=5)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return f"{value:,}"


def _difference(derived, claimed) -> float:
    if isinstance(claimed, pint.Quantity):
        d = float(derived.to(claimed.units).magnitude)
        c = float(claimed.magnitude)
    else:
        d, c = float(derived), float(claimed)
    return (d - c) / c if c else math.inf


def _claim_row(claim: Claim, level: str, figures: dict, spec: str) -> Row:
    claimed = claim.magnitude()
    derived = figures.get(claim.quantity) if QUANTITIES[claim.quantity].derived else None
    if derived is None:
        return Row(level, claim.quantity, None, claimed, claim.source, None, "not modelled",
                   spec, claim.note)
    diff = _difference(derived, claimed)
    verdict = "agrees" if abs(diff) <= claim.tolerance + 1e-12 else "disagrees"
    return Row(level, claim.quantity, derived, claimed, claim.source, diff, verdict, spec,
               claim.note)


def _tree(model: Chip | System) -> list[Chip | System]:
    """The model and the members inside it, innermost first."""
    out = [model]
    while isinstance(out[-1], System):
        out.append(out[-1].member)
    return out[::-1]


def _configured(part: Chip | System, link_bandwidth=None) -> Chip | System:
    """``part`` as its own spec configures it, free of the overrides of systems around it."""
    if isinstance(part, Chip):
        return replace(part, link_bandwidth=link_bandwidth)
    return System(part.spec, _configured(part.member, link_bandwidth
                                         or part.spec.link_bandwidth))


def rows(model: Chip | System) -> list[Row]:
    """The rows of one model: every claim of every spec in it, then unclaimed figures."""
    out: list[Row] = []
    for part in _tree(model):
        levels = _configured(part).levels()
        for claim in part.spec.claims:
            level = claim.level or part.level
            out.append(_claim_row(claim, level, levels.get(level, {}), part.name))
    claimed = {(r.level, r.quantity) for r in out}
    for level, figures in model.levels().items():
        for quantity, value in figures.items():
            if (level, quantity) not in claimed:
                out.append(Row(level, quantity, value, None, None, None, "derived",
                               model.name))
    out += _executed(model)
    out.sort(key=lambda r: (LEVELS.index(r.level), _ORDER[r.quantity]))
    return out


def _executed(model: Chip | System) -> list[Row]:
    """For a system of chips on NeuronLink: each collective executed on its chips and links,
    beside the alpha-beta formula's time (in the ``claimed`` column, source ``formula``)."""
    if not (isinstance(model, System) and model.chips > 1 and not model.over_efa
            and model.chip.neuronlink_bandwidth is not None):
        return []
    out = []
    for quantity, op in EXECUTED.items():
        executed = units.registry().Quantity(
            execute.run(model, op, COLLECTIVE_BYTES, chunk=CHECK_CHUNK).time, "s").to("ms")
        formula = model.collective(op)
        out.append(Row(model.level, quantity, executed, formula, "formula",
                       _difference(executed, formula), "derived", model.name,
                       "executed on the chips and links (sim/system/execute.py), chunks "
                       "of 64 MiB; beside it the alpha-beta formula"))
    return out


@dataclass(frozen=True)
class Report:
    """The check of one spec."""

    spec: str
    title: str
    digest: str
    rows: list[Row]

    def count(self, verdict: str) -> int:
        return sum(r.verdict == verdict for r in self.rows)


def check(names: list[str], strict: bool = False, **inputs) -> tuple[list[Report], int]:
    """Check each spec in ``names``; ``inputs`` go to :func:`sim.system.model.build`.

    Returns the reports and the exit status: 1 when ``strict`` and a row disagrees, else 0.
    Spec faults raise :class:`specs.errors.SpecError`, model faults
    :class:`sim.system.model.ModelError`.
    """
    reports = []
    for name in names:
        doc = load_document(name)
        model = build(doc.file, **inputs)
        reports.append(Report(doc.name, doc.spec.title, doc.digest, rows(model)))
    bad = any(r.count("disagrees") for r in reports)
    return reports, int(strict and bad)
