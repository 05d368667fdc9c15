"""The bundled specs, inheritance, units and the JSON Schema."""

import json

import jsonschema
import pytest
import yaml

from specs.loader import bundled, load_document
from specs.schema import spec_schema
from specs.units import parse

ALL = [n for names in bundled().values() for n in names]


def test_bundled_set():
    names = bundled()
    assert names["chip"] == ["inf1", "inf2", "trn1", "trn2", "trn3"]
    for system in ("trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge", "inf2.48xlarge",
                   "trn2.48xlarge", "trn2-ultraserver", "trn3-ultraserver",
                   "trn2-ultracluster"):
        assert system in names["system"]


@pytest.mark.parametrize("name", ALL)
def test_bundled_spec_loads_and_cites_sources(name):
    doc = load_document(name)
    assert doc.spec.name == name
    assert len(doc.digest) == 64


def test_units_binary_and_decimal_prefixes_are_distinct():
    assert parse("96 GiB", "bytes").to("B").magnitude == 96 * 2**30
    assert parse("1.5 TB", "bytes").to("B").magnitude == pytest.approx(1.5e12)
    assert parse("2.9 TB/s", "bandwidth").to("B/s").magnitude == pytest.approx(2.9e12)
    assert parse("3200 Gbps", "bandwidth").to("B/s").magnitude == pytest.approx(400e9)
    assert parse("667 TFLOPS", "compute").to("FLOPS").magnitude == pytest.approx(667e12)
    assert parse("2.4 GHz", "frequency").to("Hz").magnitude == pytest.approx(2.4e9)


def test_inheritance_deep_merges_and_does_not_inherit_claims():
    trn1, trn2, trn3 = (load_document(n).spec for n in ("trn1", "trn2", "trn3"))
    # inherited unchanged from trn1
    assert trn2.core.tensor.rows == 128 and trn2.core.psum.banks == 8
    assert trn2.core.sbuf.partitions == 128
    # overridden
    assert trn2.core.sbuf.partition_size.to("KiB").magnitude == 224
    assert trn2.core.tensor.clock.to("GHz").magnitude == pytest.approx(2.4)
    # `null` removed trn1's int8 rate
    assert "int8" not in trn2.core.tensor.rates
    assert trn3.core.tensor.sparsity is None
    assert trn3.memory.capacity.to("GiB").magnitude == 144
    # claims belong to the spec that states them
    assert {c.source for c in trn3.claims}.isdisjoint({"TRN2", "TRN2-2024"})
    assert trn1.claims != trn2.claims


def test_json_schema_is_valid_and_accepts_every_bundled_spec():
    schema = spec_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for kind, names in bundled().items():
        folder = "chips" if kind == "chip" else "systems"
        for name in names:
            from specs.loader import SPEC_ROOT
            data = yaml.safe_load((SPEC_ROOT / folder / f"{name}.yaml").read_text())
            errors = [e.message for e in validator.iter_errors(data)]
            assert not errors, (name, errors[:3])


def test_json_schema_rejects_unknown_key():
    from specs.loader import SPEC_ROOT
    data = yaml.safe_load((SPEC_ROOT / "chips" / "trn1.yaml").read_text())
    data["chip"]["core"]["tensor"]["rowz"] = 1
    assert not jsonschema.Draft202012Validator(spec_schema()).is_valid(data)


def test_json_schema_describes_every_field():
    missing = []

    def walk(node, path):
        if isinstance(node, dict):
            for key, prop in node.get("properties", {}).items():
                if "description" not in prop:
                    missing.append(".".join(path + [key]))
            for key, value in node.items():
                walk(value, path + [key])
        elif isinstance(node, list):
            for value in node:
                walk(value, path)

    walk(spec_schema(), [])
    assert not missing
    json.dumps(spec_schema())


def test_libyaml_and_the_python_parser_read_every_bundled_file_alike(monkeypatch):
    """The spec loader parses with libyaml where PyYAML has it; the pure-Python parser (its
    fallback, and the one whose errors are reported) gives every bundled YAML file the same
    data and the same position for every key and value."""
    from pathlib import Path

    from specs import yamlsrc

    if yamlsrc._FAST_LOADER is None:
        pytest.skip("PyYAML was built without libyaml")
    files = sorted(Path(yamlsrc.__file__).parent.rglob("*.yaml")) + sorted(
        (Path(yamlsrc.__file__).parents[1] / "explore").rglob("*.yaml"))
    assert len(files) > 10
    fast = {f: yamlsrc.load_yaml(f) for f in files}
    monkeypatch.setattr(yamlsrc, "_FAST_LOADER", None)
    for f in files:
        data, pos = yamlsrc.load_yaml(f)
        assert data == fast[f][0], f
        assert (pos.values, pos.keys) == (fast[f][1].values, fast[f][1].keys), f
