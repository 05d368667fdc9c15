"""Find, load, inherit and validate specs.

A spec file holds one top-level key, ``chip`` or ``system``, and optionally ``extends: NAME``
(a spec of the same kind, looked up beside the file first, then among the bundled specs). The
parent is deep-merged under the child: mappings merge key by key, lists and scalars are
replaced, and ``null`` removes an inherited key (its default applies). Claims and assumptions
are never inherited: a published figure belongs to the spec it was published for.
"""

from __future__ import annotations

import hashlib
import json
import types
import typing
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ValidationError

from .errors import Location, SpecError, nearest
from .model import ChipSpec, Source, SystemSpec
from .yamlsrc import Positions, format_path, load_yaml

SPEC_ROOT = Path(__file__).resolve().parent
FOLDERS = {"chip": SPEC_ROOT / "chips", "system": SPEC_ROOT / "systems"}
KINDS = {"chip": ChipSpec, "system": SystemSpec}
NOT_INHERITED = ("claims", "assumptions")
#: What a system of each level may be built of: chip specs, or systems of these levels.
SYSTEM_MEMBERS = {"instance": ("chip",), "server": ("chip", "instance"),
                  "cluster": ("instance", "server")}


@dataclass(frozen=True)
class Document:
    """A loaded spec with where it came from."""

    file: Path
    kind: str
    spec: ChipSpec | SystemSpec
    positions: Positions
    digest: str

    @property
    def name(self) -> str:
        return self.spec.name


def bundled() -> dict[str, list[str]]:
    """Names of the bundled specs by kind."""
    return {kind: sorted(p.stem for p in folder.glob("*.yaml"))
            for kind, folder in FOLDERS.items()}


def find(name: str | Path, near: Path | None = None) -> Path:
    """Path of a spec given as a path or as a bundled name (``trn2``, ``trn2.yaml``).

    With ``near`` (the folder of a spec that refers to this one) a relative path is taken
    from that folder rather than from the working directory.
    """
    p = Path(name)
    if near is None and p.exists():
        return p
    if near is not None and (near / p).is_file():
        return near / p
    stem = p.name.removesuffix(".yaml").removesuffix(".yml")
    if len(p.parts) > 1 or not stem or stem.startswith("."):
        raise SpecError("expected an existing spec file, found none", location=Location(p))
    for folder in ([near] if near is not None else []) + list(FOLDERS.values()):
        f = folder / f"{stem}.yaml"
        if f.is_file():
            return f
    names = sorted({n for ns in bundled().values() for n in ns})
    raise SpecError(f"expected a spec file or a bundled spec name, found {str(name)!r}",
                    location=Location(p), nearest=nearest(stem, names), choices=names)


def _merge(parent: dict, parent_pos: Positions, child: dict, child_pos: Positions,
           path: tuple = ()) -> dict:
    out = dict(parent)
    for key, value in child.items():
        if value is None:  # null removes an inherited key: its default applies
            out.pop(key, None)
            continue
        if isinstance(value, dict) and isinstance(parent.get(key), dict):
            out[key] = _merge(parent[key], parent_pos, value, child_pos, path + (key,))
        else:
            out[key] = value
            sub = path + (key,)
            for table in (parent_pos.values, parent_pos.keys):
                for k in [k for k in table if k[: len(sub)] == sub]:
                    del table[k]
    return out


def _raw(file: Path, chain: tuple[Path, ...]) -> tuple[str, dict, Positions]:
    data, pos = load_yaml(file)
    kinds = [k for k in KINDS if k in data]
    extra = [k for k in data if k not in (*KINDS, "extends")]
    if extra:
        raise SpecError(f"unknown top-level key {extra[0]!r}", location=pos.of((extra[0],), True),
                        path=extra[0], nearest=nearest(extra[0], [*KINDS, "extends"]),
                        choices=[*KINDS, "extends"])
    if len(kinds) != 1:
        found = "both 'chip' and 'system'" if kinds else "neither"
        raise SpecError(f"expected one top-level key 'chip' or 'system', found {found}",
                        location=Location(file, 1, 1))
    kind = kinds[0]
    if not isinstance(data[kind], dict):
        raise SpecError(f"expected a mapping, found {type(data[kind]).__name__}",
                        location=pos.of((kind,)), path=kind)
    parent_name = data.get("extends")
    if parent_name is None:
        return kind, data[kind], pos
    where = pos.of(("extends",))
    if not isinstance(parent_name, str):
        raise SpecError(f"expected the name of a spec, found {parent_name!r}", location=where,
                        path="extends")
    try:
        parent_file = find(parent_name, near=file.parent).resolve()
    except SpecError as exc:
        raise SpecError(f"extends a spec that does not exist: {exc.detail}", location=where,
                        path="extends", nearest=exc.nearest, choices=exc.choices) from None
    if parent_file in chain:
        cycle = " -> ".join(p.stem for p in (*chain, parent_file))
        raise SpecError(f"expected extends without a cycle, found {cycle}", location=where,
                        path="extends")
    parent_kind, parent, parent_pos = _raw(parent_file, (*chain, parent_file))
    if parent_kind != kind:
        raise SpecError(f"expected to extend a {kind} spec, found the {parent_kind} spec "
                        f"{parent_name!r}", location=where, path="extends")
    parent = {k: v for k, v in parent.items() if k not in NOT_INHERITED}
    merged_pos = Positions()
    merged_pos.update(parent_pos)
    merged = _merge(parent, merged_pos, data[kind], pos)
    merged_pos.update(pos)
    return kind, merged, merged_pos


def _walk(data, loc: tuple) -> tuple:
    """The part of pydantic's error location that is a real key path into ``data``."""
    path: tuple = ()
    node = data
    for item in loc:
        if isinstance(node, dict) and item in node:
            node = node[item]
            path += (item,)
        elif isinstance(node, list) and isinstance(item, int) and item < len(node):
            node = node[item]
            path += (item,)
    return path


def _model_fields_at(model: type[BaseModel], path: tuple) -> list[str]:
    for key in path:
        if isinstance(key, int):
            continue
        field = model.model_fields.get(key)
        if field is None:
            return []
        model = _inner_model(field.annotation)
        if model is None:
            return []
    return list(model.model_fields)


def _inner_model(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, typing.Annotated) or origin is not None:
        for arg in typing.get_args(annotation):
            found = _inner_model(arg)
            if found is not None:
                return found
    return None


def _translate(exc: ValidationError, kind: str, data: dict, pos: Positions) -> SpecError:
    return translate(exc, KINDS[kind], kind, data, pos)


#: Error types of PydanticCustomError whose message is shown as it stands.
CUSTOM_TYPES = ("quantity", "claim", "pattern", "rates", "lnc", "dims")


def translate(exc: ValidationError, model: type[BaseModel], kind: str, data: dict,
              pos: Positions, custom: tuple[str, ...] = CUSTOM_TYPES) -> SpecError:
    """A SpecError (file:line:col, key path, expected, found) for pydantic's first error.

    ``model`` validated ``data``, the value of the top-level key ``kind`` of a YAML file
    whose positions are ``pos``; errors of the ``custom`` types keep their own message.
    """
    # An unknown key is usually a misspelt one, which also shows up as a missing key: report
    # the unknown key, with the nearest known one.
    errors = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")
    err = errors[0]
    path = _walk(data, err["loc"])
    dotted = format_path((kind, *path))
    etype, ctx = err["type"], err.get("ctx") or {}
    found = err.get("input")
    if etype == "extra_forbidden":
        key = path[-1]
        known = _model_fields_at(model, path[:-1])
        return SpecError(f"unknown key {key!r}", location=pos.of((kind, *path), key=True),
                         path=dotted, nearest=nearest(key, known), choices=known)
    if etype == "missing":
        key = err["loc"][-1]
        field_path = (*path, key)
        desc = _description(model, field_path)
        return SpecError(f"missing required key {key!r}" + (f" ({desc})" if desc else ""),
                         location=pos.of((kind, *path), key=True),
                         path=format_path((kind, *field_path)))
    node = data
    for key in path:
        node = node[key]
    location = pos.of((kind, *path), key=isinstance(node, (dict, list)))
    if etype == "literal_error":
        choices = [c.strip().strip("'") for c in ctx.get("expected", "").replace(" or ", ", ")
                   .split(",") if c.strip()]
        return SpecError(f"expected one of the legal values, found {found!r}",
                         location=location, path=dotted,
                         nearest=nearest(found, choices) if isinstance(found, str) else None,
                         choices=choices)
    if etype == "choice":
        choices = ctx.get("choices", [])
        return SpecError(err["msg"], location=location, path=dotted,
                         nearest=nearest(ctx.get("found", ""), choices), choices=choices)
    if etype in custom:
        return SpecError(err["msg"], location=location, path=dotted)
    expected = err["msg"].removeprefix("Input should be ").removeprefix("Value should be ")
    expected = expected.replace("String should match pattern", "a string matching")
    if expected.startswith(("greater than", "less than")):
        expected = f"a value {expected}"
    if etype.endswith("_type") and isinstance(found, (dict, list)):
        what = "a mapping" if isinstance(found, dict) else "a list"
    else:
        what = repr(found) + ("" if isinstance(found, str) else f" ({type(found).__name__})")
    return SpecError(f"expected {expected}, found {what}", location=location, path=dotted)


def _description(model: type[BaseModel], path: tuple) -> str:
    for key in path[:-1]:
        if isinstance(key, int):
            continue
        field = model.model_fields.get(key)
        model = _inner_model(field.annotation) if field else None
        if model is None:
            return ""
    field = model.model_fields.get(path[-1])
    return (field.description or "").rstrip(".") if field else ""


@lru_cache(maxsize=1)
def sources() -> dict[str, Source]:
    """The bundled table of sources that claims cite."""
    file = SPEC_ROOT / "sources.yaml"
    data, pos = load_yaml(file)
    out = {}
    for key, value in data.items():
        try:
            out[key] = Source.model_validate(value)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            raise SpecError(err["msg"], location=pos.of((key, *err["loc"])),
                            path=format_path((key, *err["loc"]))) from None
    return out


def _check_references(doc_kind: str, spec, data: dict, pos: Positions) -> None:
    known = sources()
    for i, claim in enumerate(spec.claims):
        if claim.source not in known:
            raise SpecError(f"expected a source key from sources.yaml, found {claim.source!r}",
                            location=pos.of((doc_kind, "claims", i, "source")),
                            path=f"{doc_kind}.claims[{i}].source",
                            nearest=nearest(claim.source, known), choices=sorted(known))
    for i, assumption in enumerate(spec.assumptions):
        node = data
        for part in assumption.key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise SpecError(f"expected the key path of a field, found {assumption.key!r}",
                                location=pos.of((doc_kind, "assumptions", i, "key")),
                                path=f"{doc_kind}.assumptions[{i}].key")
            node = node[part]


def _check_latencies(spec: SystemSpec, of_chips: bool, pos: Positions) -> None:
    """A system whose links join more than one member gives their hop's latency; a system of
    chips with EFA gives its step's latency (a system of systems takes its members')."""
    over_efa = spec.topology.kind == "switch" and not of_chips
    if spec.count > 1 and spec.topology.kind != "none" and not over_efa \
            and spec.link_latency is None:
        raise SpecError(f"expected link_latency (one NeuronLink hop of a collective) for "
                        f"{spec.count} members joined by {spec.topology.kind}, found none",
                        location=pos.of(("system", "topology"), key=True),
                        path="system.link_latency")
    if of_chips and spec.efa is not None and spec.efa_latency is None:
        raise SpecError("expected efa_latency (one step of a collective over EFA) beside efa, "
                        "found none", location=pos.of(("system", "efa"), key=True),
                        path="system.efa_latency")


def load_document(name: str | Path, _chain: tuple[Path, ...] = ()) -> Document:
    """Load, inherit, validate and cross-check a spec; raise SpecError on any fault."""
    file = find(name)
    resolved = file.resolve()
    kind, data, pos = _raw(resolved if file.is_file() else file, (resolved,))
    try:
        spec = KINDS[kind].model_validate(data)
    except ValidationError as exc:
        raise _translate(exc, kind, data, pos) from None
    _check_references(kind, spec, data, pos)
    if kind == "system":
        where = pos.of(("system", "member"))
        try:
            member_file = find(spec.member, near=resolved.parent).resolve()
        except SpecError as exc:
            raise SpecError(f"names a member spec that does not exist: {exc.detail}",
                            location=where, path="system.member", nearest=exc.nearest,
                            choices=exc.choices) from None
        if member_file in _chain or member_file == resolved:
            raise SpecError("expected members without a cycle, found one", location=where,
                            path="system.member")
        member = load_document(member_file, (*_chain, resolved))
        allowed = SYSTEM_MEMBERS[spec.level]
        got = member.kind if member.kind == "chip" else member.spec.level
        if got not in allowed:
            raise SpecError(f"expected a member of level {' or '.join(allowed)} for a "
                            f"{spec.level}, found the {got} spec {spec.member!r}",
                            location=where, path="system.member")
        _check_latencies(spec, member.kind == "chip", pos)
    canonical = json.dumps({"kind": kind, "spec": spec.model_dump(mode="json")},
                           sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return Document(resolved, kind, spec, pos, digest)


def load(name: str | Path) -> ChipSpec | SystemSpec:
    """The validated spec object of ``name`` (a path or a bundled name)."""
    return load_document(name).spec
