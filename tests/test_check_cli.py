"""`gen check` on the command line: formats, --strict, errors."""

import json

from click.testing import CliRunner

from generators.cli import main
from sim.system.check import FIELDS


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_table_and_status():
    result = run("check", "trn2.48xlarge")
    assert result.exit_code == 0, result.output
    assert "compute.bf16" in result.output and "disagrees" in result.output
    assert "not modelled" in result.output


def test_strict_fails_on_a_disagreement():
    result = run("check", "trn2.48xlarge", "--strict")
    assert result.exit_code == 1


def test_json_of_two_specs():
    result = run("check", "trn1.32xlarge", "trn2-ultraserver", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [d["spec"] for d in data] == ["trn1.32xlarge", "trn2-ultraserver"]
    assert all(tuple(row) == FIELDS for d in data for row in d["rows"])
    efa = [r for r in data[1]["rows"] if (r["level"], r["quantity"], r["source"])
           == ("server", "efa.bandwidth", "ART-EN")]
    assert efa == [{"level": "server", "quantity": "efa.bandwidth", "derived": "12.8 Tbps",
                    "claimed": "12.8 Tbps", "source": "ART-EN", "difference": 0.0,
                    "verdict": "agrees"}]


def test_markdown_and_html_to_a_file(tmp_path):
    md = tmp_path / "check.md"
    assert run("check", "trn2", "--format", "md", "-o", str(md)).exit_code == 0
    assert md.read_text().startswith("## Trainium2 (`trn2`)")
    html = tmp_path / "check.html"
    assert run("check", "trn2", "--format", "html", "-o", str(html)).exit_code == 0
    assert "<td class=\"source\">ART-DE</td>" in html.read_text()


def test_table_to_a_file_is_a_usage_error(tmp_path):
    result = run("check", "trn2", "-o", str(tmp_path / "x.txt"))
    assert result.exit_code == 2
    assert "--output needs --format json, md or html" in result.output


def test_unknown_spec_is_one_line_and_status_2():
    result = run("check", "trn9")
    assert result.exit_code == 2
    assert result.output.startswith("error: ")
    assert "expected a spec file or a bundled spec name, found 'trn9'" in result.output
    assert result.output.count("\n") == 1


def test_model_error_is_one_line_and_status_2(tmp_path):
    (tmp_path / "odd.yaml").write_text(
        "system:\n  name: odd\n  title: Odd\n  level: instance\n  member: trn2\n  count: 8\n"
        "  topology: {kind: torus2d, dims: [4, 4]}\n  link_latency: 1 us\n")
    result = run("check", str(tmp_path / "odd.yaml"))
    assert result.exit_code == 2
    assert result.output == ("error: odd: topology dims [4, 4] must hold 8 chips, not 16\n")
