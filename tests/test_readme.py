"""The README's examples are run, so they cannot drift from the code."""

import re
from pathlib import Path

from click.testing import CliRunner

from generators.cli import main
from specs.loader import load_document

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    """The README's fenced blocks of ``lang`` ("" for those without one), each opening and
    closing fence paired in order."""
    return [body for found, body in re.findall(r"^```(\w*)\n(.*?)^```$", README,
                                                flags=re.S | re.M) if found == lang]


def test_spec_example_loads(tmp_path):
    (example,) = _blocks("yaml")
    path = tmp_path / "example.yaml"
    path.write_text(example)
    spec = load_document(path).spec
    assert spec.cores == 8 and spec.memory.capacity.to("GiB").magnitude == 96
    assert spec.core.tensor.rows == 128  # inherited from trn1


def test_quick_start_commands_exist():
    (quick,) = [b for b in _blocks("") if "./gen" in b]
    lines = [line.split() for line in quick.strip().splitlines()]
    assert lines[0][:2] == ["./gen", "chip"] and lines[1] == ["./run-tests"]
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "./run-tests" in ci


def test_every_command_in_the_table_exists():
    documented = set(re.findall(r"^\| `gen (\w+)", README, flags=re.M))
    assert documented <= set(main.commands), documented - set(main.commands)
    for name in documented:
        assert CliRunner().invoke(main, [name, "--help"]).exit_code == 0


def test_python_examples_run():
    blocks = _blocks("python")
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
