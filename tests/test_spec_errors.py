"""Malformed specs: each is refused with one message naming file, line, key path, expected
and found; the CLI exits 2 with that line, no traceback and no output directory."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import BASE_CHIP
from generators.cli import main
from sim.system.model import MAX_GRAPH_CHIPS
from specs.errors import SpecError
from specs.loader import load_document

REPO = Path(__file__).resolve().parents[1]


def sub(old: str, new: str) -> str:
    assert old in BASE_CHIP, old
    return BASE_CHIP.replace(old, new, 1)


# (id, file text or {name: text}, message regex, text on the line the error must point at)
CASES = [
    ("yaml-syntax", sub("cols: 128", "cols: [128"), r"YAML syntax error", "clock"),
    ("unknown-key", sub("cols: 128", "colz: 128"),
     r"chip\.core\.tensor\.colz: unknown key 'colz'; did you mean 'cols'\?", "colz"),
    ("unknown-top-key", "chipp:\n  name: x\n", r"unknown top-level key 'chipp'; did you mean "
     r"'chip'\?", "chipp"),
    ("wrong-type-string-int", sub("rows: 128", "rows: '128'"),
     r"chip\.core\.tensor\.rows: expected a valid integer, found '128'", "rows"),
    ("wrong-type-mapping", sub("cores: 2", "cores: {n: 2}"),
     r"chip\.cores: expected a valid integer, found a mapping", "cores"),
    ("zero-size", sub("rows: 128", "rows: 0"),
     r"chip\.core\.tensor\.rows: expected a value greater than 0, found 0", "rows"),
    ("negative-size", sub("cores: 2", "cores: -8"),
     r"chip\.cores: expected a value greater than 0, found -8", "cores"),
    # found by the fuzz test (seed 104): a zero rate crashed the roofline picture
    ("zero-rate", sub("rates: {fp32: 0.25}", "rates: {fp32: 0.0}"),
     r"chip\.core\.tensor\.rates\.fp32: expected a value greater than 0, found 0\.0", "rates"),
    ("negative-quantity", sub("clock: 2.8 GHz", "clock: -2.8 GHz"),
     r"chip\.core\.tensor\.clock: expected a positive frequency", "clock: -2.8"),
    ("wrong-dimension", sub("bandwidth: 820 GiB/s", "bandwidth: 2.9 GHz"),
     r"chip\.memory\.bandwidth: expected a bandwidth .*found '2\.9 GHz' \(a frequency\)",
     "memory"),
    ("size-as-bandwidth", sub("capacity: 32 GiB", "capacity: 32 GiB/s"),
     r"chip\.memory\.capacity: expected a size .*found '32 GiB/s' \(a bandwidth\)", "memory"),
    ("unknown-unit", sub("capacity: 32 GiB", "capacity: 32 GiBs"),
     r"chip\.memory\.capacity: expected a size .*unknown unit", "memory"),
    ("no-unit", sub("capacity: 32 GiB", "capacity: 32"),
     r"chip\.memory\.capacity: expected a size .*\(a string with a unit\), found 32", "memory"),
    ("missing-field", sub("  cores: 2\n", ""),
     r"chip\.cores: missing required key 'cores' \(Physical NeuronCores per chip\)", "chip:"),
    ("duplicate-key", sub("cols: 128", "cols: 128\n      cols: 64"),
     r"chip\.core\.tensor\.cols: duplicate key 'cols' \(first at line 10\)", "cols: 64"),
    ("object-tag", sub("title: Test chip", "title: !!python/object/apply:os.system [ls]"),
     r"expected plain YAML data, found the tag 'tag:yaml.org,2002:python/object/apply:os\.sys",
     "title"),
    ("custom-tag", sub("title: Test chip", "title: !secret x"),
     r"chip\.title: expected plain YAML data, found the tag '!secret'", "title"),
    ("alias-bomb", "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
     "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
     "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
     "f: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
     r"expected at most 100,000 values, found more \(alias expansion bomb\?\)", None),
    ("merge-key", "base: &b {rows: 1}\nchip:\n  <<: *b\n",
     r"found a '<<' merge key", "<<"),
    ("not-utf8", b"chip:\n  name: caf\xe9\n", r"expected UTF-8 text, found the byte 0xe9",
     "name"),
    ("empty-file", "", r"expected a YAML mapping, found an empty file", None),
    ("comments-only", "# nothing here\n", r"expected a YAML mapping, found an empty file", None),
    ("top-level-list", "- chip\n", r"expected a mapping at the top level, found list", "- chip"),
    ("two-documents", BASE_CHIP + "---\nchip: {}\n", r"expected one YAML document, found "
     r"several", "chip: {}"),
    ("chip-and-system", BASE_CHIP + "system: {}\n", r"expected one top-level key 'chip' or "
     r"'system', found both", None),
    ("bad-literal", sub("family: trainium", "family: trainum"),
     r"chip\.family: expected one of the legal values, found 'trainum'; did you mean "
     r"'trainium'\? \(legal: inferentia, trainium\)", "family"),
    ("bad-format", sub("formats: [bf16, fp16, fp32]", "formats: [bf16, bf61, fp32]"),
     r"chip\.core\.tensor\.formats\[1\]: expected one of the legal values, found 'bf61'; "
     r"did you mean 'bf16'\?", "formats"),
    ("rate-unlisted-format", sub("rates: {fp32: 0.25}", "rates: {fp32: 0.25, int8: 2}"),
     r"chip\.core\.tensor: expected a rate only for a listed format, found 'int8'", "tensor:"),
    ("reduced-range", sub("functions: [exp, gelu]}",
                          "functions: [exp, gelu],\n                 approximations: "
                          "{exp: {range: [-8, 8]}}}"),
     r"chip\.core\.scalar: expected no range for exp \(its argument is reduced to a fixed "
     r"range\), found \[-8\.0, 8\.0\]", "scalar:"),
    ("vector-function-unlisted", sub("vector: {clock: 1.12 GHz, lanes: 128}",
                                     "vector: {clock: 1.12 GHz, lanes: 128, functions: [tanh]}"),
     r"chip\.core: expected vector\.functions among scalar\.functions \(one table of "
     r"approximations\), found 'tanh'", "  core:"),
    ("lnc-default", sub("lnc: {options: [1], default: 1}", "lnc: {options: [1], default: 2}"),
     r"chip\.lnc: expected default to be one of the options \[1\], found 2", "lnc"),
    ("claim-source", sub("source: TRN1}", "source: TRN9}"),
     r"chip\.claims\[0\]\.source: expected a source key from sources\.yaml, found 'TRN9'; "
     r"did you mean 'TRN\d'\?", "TRN9"),
    ("claim-quantity", sub("quantity: compute.bf16", "quantity: compute.bf61"),
     r"chip\.claims\[0\]\.quantity: expected a known quantity, found 'compute\.bf61'; did you "
     r"mean 'compute\.bf16'\?", "compute.bf61"),
    ("claim-dimension", sub("value: 190 TFLOPS", "value: 96 GiB"),
     r"chip\.claims\[0\]: compute\.bf16: expected a compute rate .*found '96 GiB' \(a bytes\)",
     "96 GiB"),
    ("claim-no-unit", sub("value: 190 TFLOPS", "value: 190"),
     r"chip\.claims\[0\]: expected a compute rate .* for compute\.bf16, found '190' \(no unit\)",
     "value: 190"),
    ("assumption-key", sub("key: core.tensor.rows", "key: core.tensor.rowz"),
     r"chip\.assumptions\[0\]\.key: expected the key path of a field, found "
     r"'core\.tensor\.rowz'", "rowz"),
    ("sparsity-pattern", sub("rates: {fp32: 0.25}",
                             "rates: {fp32: 0.25}\n      sparsity: {patterns: ['4:2'], "
                             "speedup: 2}"),
     r"chip\.core\.tensor\.sparsity\.patterns: expected N:M with 0 < N < M, found '4:2'",
     "sparsity"),
    ("bad-name", sub("name: testchip", "name: Test Chip"),
     r"chip\.name: expected a string matching", "name"),
    ("extends-missing", {"spec.yaml": "extends: trn7\nchip: {name: x}\n"},
     r"extends: extends a spec that does not exist: .*found 'trn7'; did you mean 'trn\d'\?",
     "extends"),
    ("extends-cycle", {"spec.yaml": "extends: b\nchip: {name: a}\n",
                       "b.yaml": "extends: spec\nchip: {name: b}\n"},
     r"extends: expected extends without a cycle, found spec -> b -> spec", "b.yaml:extends"),
    ("op-cycles-below-one", {"spec.yaml": "extends: trn2\nchip:\n  name: a\n  core:\n"
                                          "    costs: {op_cycles: {reciprocal: 0.5}}\n"},
     r"chip\.core\.costs\.op_cycles\.reciprocal: expected a value greater than or equal to "
     r"1, found 0\.5", "op_cycles"),
    ("extends-self", {"spec.yaml": "extends: spec\nchip: {name: a}\n"},
     r"expected extends without a cycle, found spec -> spec", "extends"),
    ("extends-other-kind", {"spec.yaml": "extends: trn2.48xlarge\nchip: {name: a}\n"},
     r"extends: expected to extend a chip spec, found the system spec 'trn2\.48xlarge'",
     "extends"),
    ("inherited-override-error", {"spec.yaml": "extends: trn2\nchip:\n  name: t\n  core:\n"
                                               "    tensor: {rows: 0}\n"},
     r"chip\.core\.tensor\.rows: expected a value greater than 0, found 0", "rows"),
    ("system-member-missing", {"spec.yaml": "system:\n  name: s\n  title: S\n  level: instance"
                                            "\n  member: trn22\n  count: 16\n"
                                            "  topology: {kind: none}\n"},
     r"system\.member: names a member spec that does not exist: .*found 'trn22'; did you "
     r"mean 'trn2'\?", "member"),
    ("system-member-level", {"spec.yaml": "system:\n  name: s\n  title: S\n  level: server\n"
                                          "  member: trn2-ultraserver\n  count: 2\n"
                                          "  topology: {kind: none}\n"},
     r"system\.member: expected a member of level chip or instance for a server, found the "
     r"server spec", "member"),
    ("deep-flow-nesting", {"spec.yaml": "chip: " + "[" * 5000 + "]" * 5000 + "\n"},
     r"spec\.yaml:1:71: expected nesting at most 64 deep, found deeper", "chip"),
    ("deep-block-nesting", {"spec.yaml": "chip:\n" + "".join(
        " " * i + f"k{i}:\n" for i in range(1, 1500)) + " " * 1500 + "x: 1\n"},
     r"expected nesting at most 64 deep, found deeper", None),
    ("torus-dims", {"spec.yaml": "system:\n  name: s\n  title: S\n  level: instance\n"
                                 "  member: trn2\n  count: 16\n"
                                 "  topology: {kind: torus2d, dims: [4, 4, 4]}\n"},
     r"system\.topology: expected 2 dimensions for torus2d, found 3", "topology"),
    ("link-latency-missing", {"spec.yaml": "system:\n  name: s\n  title: S\n  level: instance"
                                           "\n  member: trn2\n  count: 4\n"
                                           "  topology: {kind: ring, dims: [4]}\n"},
     r"spec\.yaml:7:3: system\.link_latency: expected link_latency \(one NeuronLink hop of a "
     r"collective\) for 4 members joined by ring, found none", "topology"),
    ("efa-latency-missing", {"spec.yaml": "system:\n  name: s\n  title: S\n  level: instance"
                                          "\n  member: trn2\n  count: 1\n"
                                          "  topology: {kind: none}\n  efa: 100 Gbps\n"},
     r"system\.efa_latency: expected efa_latency \(one step of a collective over EFA\) beside "
     r"efa, found none", "efa:"),
]


def _write(tmp_path: Path, content) -> Path:
    files = content if isinstance(content, dict) else {"spec.yaml": content}
    for name, text in files.items():
        data = text if isinstance(text, bytes) else text.encode()
        (tmp_path / name).write_bytes(data)
    return tmp_path / "spec.yaml"


def _line_of(content, marker) -> int | None:
    if marker is None:
        return None
    name, _, marker = marker.rpartition(":") if ".yaml:" in marker else ("spec.yaml", "", marker)
    text = content[name] if isinstance(content, dict) else content
    text = text.decode("latin-1") if isinstance(text, bytes) else text
    for i, line in enumerate(text.splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"marker {marker!r} not in the case's text")


@pytest.mark.parametrize("content,pattern,marker", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_spec_error_message(tmp_path, content, pattern, marker):
    path = _write(tmp_path, content)
    with pytest.raises(SpecError, match=pattern) as info:
        load_document(path)
    message = str(info.value)
    file = marker.partition(":")[0] if marker and ".yaml:" in marker else "spec.yaml"
    assert message.startswith(file), message
    assert "\n" not in message
    line = _line_of(content, marker)
    if line is not None:
        assert message.startswith(f"{file}:{line}:"), message


@pytest.mark.parametrize("content,pattern,marker", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_cli_refuses_bad_spec(tmp_path, content, pattern, marker):
    path = _write(tmp_path, content)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["chip", str(path), "-o", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and re.match(r"error: \w+\.yaml(:\d+:\d+)?: ", lines[0]), lines
    assert not out.exists()
    assert not any(p.name.startswith(".out") for p in tmp_path.iterdir())


def test_directory_as_spec(tmp_path):
    with pytest.raises(SpecError, match=r"expected a YAML file, found a directory"):
        load_document(tmp_path)


def test_missing_bundled_name_lists_choices():
    with pytest.raises(SpecError, match=r"found 'trn9'; did you mean 'trn\d'\? \(legal: "
                                        r"inf1, .*trn2.*\)"):
        load_document("trn9")


def test_cli_subprocess_no_traceback(tmp_path):
    path = _write(tmp_path, sub("rows: 128", "rows: -1"))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "generators.cli", "chip", str(path), "-o",
                           str(tmp_path / "out")], capture_output=True, text=True, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: spec.yaml:9:")
    assert proc.stdout == ""
    assert not (tmp_path / "out").exists() and not (tmp_path / "build").exists()


@pytest.mark.parametrize("command", [["chip", "--scale", "sim"], ["check"]])
def test_cli_model_error_is_one_line(tmp_path, command):
    """A spec that loads but makes no link port: one line, status 2, nothing written."""
    path = _write(tmp_path, "extends: trn2\nchip:\n  name: toy\n  title: Toy\n"
                            "  neuronlink: {credits: 16}\n")
    out = tmp_path / "out"
    args = [command[0], str(path), *command[1:]] + (["-o", str(out)] if command[0] == "chip"
                                                    else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert result.stderr == ("error: toy: neuronlink parameters do not make a link port "
                             "(credits must be at least max_packet (128), not 16; a packet "
                             "of 4096 B is 128 flits of 256 bits)\n")
    assert not out.exists()


def test_a_huge_neuronlink_domain_is_refused_before_its_graph(tmp_path):
    """A chip count mutated to 1e11 (found by the fuzz test) built switch nodes until memory ran
    out; the model refuses a NeuronLink graph above its limit at once, with status 2."""
    text = (REPO / "specs" / "systems" / "trn3-ultraserver.yaml").read_text()
    assert "count: 144\n" in text
    path = tmp_path / "big.yaml"
    path.write_text(text.replace("count: 144\n", "count: 100000000000\n"))
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "error: trn3-ultraserver: 100,000,000,000 chips joined by NeuronLink (switch); the "
        f"model builds link graphs of at most {MAX_GRAPH_CHIPS} chips (join larger systems "
        "over EFA)\n")
