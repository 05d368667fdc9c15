"""Load a YAML file with one top-level key into a typed pydantic model, errors as SpecError.

Sweeps and workloads use the spec language's YAML loader (positions for every key, duplicate
keys and object-building tags rejected) and its error translation, so a bad sweep reads like a
bad chip spec: ``file:line:col: key.path: expected ..., found ...``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from specs.errors import Location, SpecError, nearest
from specs.loader import CUSTOM_TYPES, translate
from specs.yamlsrc import Positions, load_yaml

#: Error types raised by the exploration models' own validators (message shown as it stands).
EXPLORE_TYPES = (*CUSTOM_TYPES, "sweep")


class Strict(BaseModel):
    """Frozen, unknown keys rejected, no coercion between types."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def load_model(file: Path, root: str, model):
    """Validate the value of the top-level key ``root`` of ``file`` against ``model``.

    ``model`` is a pydantic model class, or a function of ``(value, positions)`` that picks
    one (raising SpecError when it cannot).

    Returns ``(object, data, positions)``; the data and positions let the caller report later
    cross-checks (a base spec or workload that does not exist) at the right line.
    """
    file = Path(file)
    data, pos = load_yaml(file)
    extra = [k for k in data if k != root]
    if extra:
        raise SpecError(f"unknown top-level key {extra[0]!r}", location=pos.of((extra[0],), True),
                        path=extra[0], nearest=nearest(extra[0], [root]), choices=[root])
    if root not in data:
        raise SpecError(f"expected the top-level key {root!r}, found none",
                        location=Location(file, 1, 1))
    if not isinstance(data[root], dict):
        raise SpecError(f"expected a mapping, found {type(data[root]).__name__}",
                        location=pos.of((root,)), path=root)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        model = model(data[root], pos)
    try:
        obj = model.model_validate(data[root])
    except ValidationError as exc:
        raise translate(exc, model, root, data[root], pos, custom=EXPLORE_TYPES) from None
    return obj, data[root], pos


def where(pos: Positions, root: str, *path) -> Location | None:
    """Location of ``root.path`` in a loaded file."""
    return pos.of((root, *path))
