"""JSON Schema of spec files, for editors (``gen schema``)."""

from __future__ import annotations

from pydantic.json_schema import models_json_schema

from .model import ChipSpec, SystemSpec
from .quantities import QUANTITIES

SCHEMA_ID = "https://trngen.dev/schema/spec.json"


def spec_schema() -> dict:
    """One schema for chip and system spec files (Draft 2020-12)."""
    _, top = models_json_schema([(ChipSpec, "validation"), (SystemSpec, "validation")],
                                ref_template="#/$defs/{model}")
    defs = top["$defs"]
    claim = defs["Claim"]["properties"]["quantity"]
    claim["enum"] = sorted(QUANTITIES)
    claim["description"] += " One of: " + ", ".join(sorted(QUANTITIES)) + "."
    defs.update(_partial(defs))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "trngen spec",
        "description": "A chip generation (top-level key 'chip') or a system built of chips "
                       "(top-level key 'system').",
        "type": "object",
        "properties": {
            "extends": {"type": "string", "description": "Name of a spec of the same kind to "
                        "inherit from (deep merge; claims and assumptions are not inherited)."},
            "chip": {"type": "object", "description": "A chip generation."},
            "system": {"type": "object", "description": "An instance, server or cluster."},
        },
        "additionalProperties": False,
        "oneOf": [{"required": ["chip"]}, {"required": ["system"]}],
        "if": {"required": ["extends"]},
        "then": {"properties": {
            "chip": {"$ref": "#/$defs/PartialChipSpec",
                     "description": "A chip that overrides the one it extends."},
            "system": {"$ref": "#/$defs/PartialSystemSpec",
                       "description": "A system that overrides the one it extends."}}},
        "else": {"properties": {
            "chip": {"$ref": "#/$defs/ChipSpec", "description": "A chip generation."},
            "system": {"$ref": "#/$defs/SystemSpec",
                       "description": "An instance, server or cluster."}}},
        "$defs": defs,
    }


def _partial(defs: dict) -> dict:
    """Copies of the object definitions for specs that extend another: no required keys, and
    ``null`` allowed everywhere (it removes an inherited key)."""

    def relax(node):
        if isinstance(node, dict):
            out = {k: relax(v) for k, v in node.items() if k != "required"}
            if isinstance(out.get("additionalProperties"), dict):
                out["additionalProperties"] = {"anyOf": [out["additionalProperties"],
                                                         {"type": "null"}]}
            ref = out.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/") and \
                    defs.get(ref.rsplit("/", 1)[1], {}).get("type") == "object":
                out["$ref"] = ref.replace("#/$defs/", "#/$defs/Partial")
            return out
        if isinstance(node, list):
            return [relax(v) for v in node]
        return node

    out = {}
    for name, node in defs.items():
        if node.get("type") != "object":
            continue
        part = relax(node)
        for key, prop in part.get("properties", {}).items():
            desc = prop.get("description", "")
            part["properties"][key] = {"anyOf": [prop, {"type": "null"}], "description": desc}
        part["description"] = f"{node.get('description', name)} (in a spec that extends another)"
        out[f"Partial{name}"] = part
    return out
