"""What a unit tells Amaranth about elaboratables it makes on purpose without elaborating."""

from __future__ import annotations

import re
import warnings

from amaranth.hdl import Elaboratable, UnusedElaboratable

__all__ = ["unelaborated"]


def unelaborated(*objects: object) -> None:
    """Amaranth warns when an elaboratable that was made is collected without having been
    elaborated. For those of ``objects`` that are elaboratables (made for their signatures,
    their modules emitted apart) that is intended: a warnings filter for
    :class:`amaranth.hdl.UnusedElaboratable` that matches each one alone (by its ``repr``)
    keeps the warning for every other."""
    for obj in objects:
        if isinstance(obj, Elaboratable):
            warnings.filterwarnings("ignore", message=re.escape(f"{obj!r} created but never used"),
                                    category=UnusedElaboratable)
