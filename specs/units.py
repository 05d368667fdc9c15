"""Quantities with units: parsing, dimension checks and display, through pint.

The registry is built from ``units.txt`` beside this file, in which bits and operations are
dimensions of their own (stock pint treats a bit as dimensionless, so ``2.9 GHz`` would pass for
a bandwidth).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pint

DIMENSIONS = {
    "bytes": ("[information]", "a size such as '96 GiB'"),
    "bandwidth": ("[information] / [time]", "a bandwidth such as '2.9 TB/s' or '3200 Gbps'"),
    "frequency": ("1 / [time]", "a frequency such as '2.4 GHz'"),
    "compute": ("[compute] / [time]", "a compute rate such as '667 TFLOPS'"),
    "length": ("[length]", "a length such as '5 nm'"),
    "time": ("[time]", "a time such as '2 us'"),
    "price": ("[currency] / [time]", "a price such as '12.5 USD/h'"),
    "count": ("", "a plain number such as 8"),
    "ratio": ("", "a plain number such as 1.3"),
}


@lru_cache(maxsize=1)
def registry() -> pint.UnitRegistry:
    ureg = pint.UnitRegistry(str(Path(__file__).with_name("units.txt")), cache_folder=None)
    ureg.formatter.default_format = "~"
    return ureg


Quantity = pint.Quantity


class UnitParseError(ValueError):
    """Text that is not a quantity of the expected dimension (message: expected/found)."""


def parse(text: str, dimension: str) -> pint.Quantity:
    """Parse ``text`` (``'96 GiB'``) as a quantity of ``dimension`` (a key of DIMENSIONS)."""
    dim, what = DIMENSIONS[dimension]
    ureg = registry()
    if not isinstance(text, str):
        raise UnitParseError(f"expected {what} (a string with a unit), found {text!r}")
    try:
        q = ureg.Quantity(text.strip())
    except (pint.errors.UndefinedUnitError, pint.errors.DefinitionSyntaxError) as exc:
        raise UnitParseError(f"expected {what}, found {text!r} (unknown unit: {exc})") from None
    except Exception:
        raise UnitParseError(f"expected {what}, found {text!r} (not a quantity)") from None
    if not isinstance(q, pint.Quantity):
        q = ureg.Quantity(q)
    if dim and not q.check(dim):
        raise UnitParseError(
            f"expected {what}, found {text!r} ({describe_dimension(q)})")
    if not dim and not q.dimensionless:
        raise UnitParseError(f"expected {what}, found {text!r} ({describe_dimension(q)})")
    return q


def describe_dimension(q: pint.Quantity) -> str:
    for name, (dim, _) in DIMENSIONS.items():
        if dim and q.check(dim):
            return f"a {name}" if name != "compute" else "a compute rate"
    if q.dimensionless:
        return "a plain number"
    return f"of dimension {q.dimensionality}"


def dimension_of(q: pint.Quantity) -> str:
    for name, (dim, _) in DIMENSIONS.items():
        if dim and q.check(dim):
            return name
    return "count" if q.dimensionless else str(q.dimensionality)


def show(q, unit: str | None = None, digits: int = 4) -> str:
    """Compact text of a quantity, optionally in ``unit`` (``'TFLOPS'``)."""
    if not isinstance(q, pint.Quantity):
        return f"{q:,.{digits}g}" if isinstance(q, float) else f"{q:,}"
    if unit:
        q = q.to(unit)
    mag = q.magnitude
    text = f"{mag:.{digits}g}" if isinstance(mag, float) else f"{mag}"
    if "e+" in text:
        text = f"{mag:,.0f}"
    units = f"{q.units:~}".replace(" ", "")
    return f"{text} {units}" if units else text
