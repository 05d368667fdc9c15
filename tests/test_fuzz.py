"""A standing, bounded, seeded fuzz test of every bundled input file.

Each bundled chip spec, system spec, sweep and workload is mutated at random (a line deleted,
duplicated or swapped with another, a number or a unit changed, a line's indentation changed,
the file cut short) and run through what reads it:

- chip specs through ``gen show``, ``gen check`` and ``gen chip --scale sim``;
- system specs through ``gen show`` and ``gen check``;
- sweeps and workloads through the loaders ``gen explore`` calls before anything runs.

Every case must end with status 0 or 2 (a loader: a result or an InputError), never a
traceback; status 2 is one line on stderr and leaves nothing behind. ``gen chip`` runs for
real up to the point where the units' parameter objects exist (spec, mapping, system model,
datasheets); the Verilog emitters, which see only those objects and are tested on their own,
are replaced by a stand-in that writes one empty module per parameter set, so that a case
takes a fraction of a second.
A handful of cases also run as subprocesses, as a user runs them. The mutants come from a
fixed seed unless ``--seed N`` is given, so that the suite is deterministic; other seeds
explore further.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from explore import sweep as sweeps
from explore import workloads
from generators import units
from generators.cli import main
from specs.errors import InputError

REPO = Path(__file__).resolve().parents[1]
FILES = {
    "chip": sorted((REPO / "specs" / "chips").glob("*.yaml")),
    "system": sorted((REPO / "specs" / "systems").glob("*.yaml")),
    "sweep": sorted((REPO / "explore" / "sweeps").glob("*.yaml")),
    "workload": sorted((REPO / "explore" / "workloads").glob("*.yaml")),
}
MUTANTS = 3          # per file
NUMBER = re.compile(r"(?<![\w.])-?\d+(\.\d+)?([eE][+-]?\d+)?(?![\w.])")
UNIT = re.compile(r"(?<=\d )(GHz|MHz|GiB|KiB|MiB|TB/s|GB/s|GiB/s|TFLOPS|Gbps|USD/h|nm|B)\b")
NUMBERS = ["0", "-1", "1", "3", "7.5", "1e30", "100000000000", "0.0", "x", "[]", "{}", "null"]
UNITS = ["GHz", "GiB", "TB/s", "TFLOPS", "s", "W", "parsecs", ""]


def mutate(text: str, rng: random.Random) -> tuple[str, str]:
    """One random mutation of ``text``: (the new text, what was done)."""
    lines = text.splitlines(keepends=True)
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    kind = rng.choice(["delete", "duplicate", "swap", "number", "unit", "indent", "truncate"])
    if kind == "delete":
        del lines[i]
    elif kind == "duplicate":
        lines.insert(i, lines[i])
    elif kind == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "number":
        spots = [(n, m) for n, line in enumerate(lines) for m in NUMBER.finditer(line)]
        if spots:
            n, m = rng.choice(spots)
            lines[n] = lines[n][:m.start()] + rng.choice(NUMBERS) + lines[n][m.end():]
            i = n
    elif kind == "unit":
        spots = [(n, m) for n, line in enumerate(lines) for m in UNIT.finditer(line)]
        if spots:
            n, m = rng.choice(spots)
            lines[n] = lines[n][:m.start()] + rng.choice(UNITS) + lines[n][m.end():]
            i = n
    elif kind == "indent":
        body = lines[i].lstrip(" ")
        lines[i] = " " * max(0, len(lines[i]) - len(body) + rng.choice([-2, -1, 1, 2, 4])) + body
    else:
        cut = rng.randrange(len(text))
        return text[:cut], f"truncate at byte {cut}"
    return "".join(lines), f"{kind} at line {i + 1}"


def _cases(seed: int):
    rng = random.Random(seed)
    for kind, files in FILES.items():
        for file in files:
            for _ in range(MUTANTS):
                text, what = mutate(file.read_text(encoding="utf-8"), rng)
                yield kind, file, text, what


def _one_line_or_nothing(result, what: str, out: Path | None = None) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        f"{what}: {result.exception!r}"
    assert result.exit_code in (0, 2), f"{what}: status {result.exit_code}: {result.output}"
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), f"{what}: {result.stderr}"
        if out is not None:
            assert not out.exists(), f"{what}: {out} written"
            assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")
                        and not p.name.endswith(".lock")], f"{what}: staging left behind"


@pytest.fixture
def stand_in_emitters(monkeypatch):
    """The units' Verilog emitters replaced by one that checks the parameters' type (a unit
    emitted in parts, the core, then emits as one stand-in too)."""
    def stub(name):
        count = []

        def emit(params, rtl_dir, header):
            assert dataclasses.is_dataclass(params), params
            module = f"{name}_{len(count)}"
            count.append(module)
            path = Path(rtl_dir) / f"{module}.v"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"// {params!r}\nmodule {module};\nendmodule\n")
            return [path]
        return emit

    for name, unit in list(units.UNITS.items()):
        monkeypatch.setitem(units.UNITS, name, dataclasses.replace(unit, emit=stub(name),
                                                                   parts=None, take_parts=None))


#: The suite's default seed for the mutants, fixed so that every run of the suite (and CI)
#: checks the same cases; ``--seed N`` explores others.
FUZZ_SEED = 1


@pytest.fixture
def seed(request):
    value = request.config.getoption("--seed")
    seed = FUZZ_SEED if value is None else value
    print(f"seed={seed} (re-run with --seed {seed})")
    return seed


def test_mutated_inputs_end_in_status_0_or_2(tmp_path, seed, stand_in_emitters):
    runner = CliRunner()
    count = 0
    for n, (kind, file, text, what) in enumerate(_cases(seed)):
        case = tmp_path / str(n)
        case.mkdir()
        path = case / file.name
        path.write_text(text, encoding="utf-8")
        what = f"{file.name} ({what}, seed {seed})"
        if kind in ("chip", "system"):
            for command in (["show"], ["check"]):
                _one_line_or_nothing(runner.invoke(main, [*command, str(path)]), what)
            if kind == "chip":
                out = case / "out"
                result = runner.invoke(main, ["chip", str(path), "--scale", "sim", "-o",
                                              str(out)])
                _one_line_or_nothing(result, what, out)
        else:
            load = sweeps.load if kind == "sweep" else workloads.load
            try:
                load(path)
            except InputError as exc:
                assert "\n" not in str(exc), f"{what}: {exc}"
        count += 1
    assert count == MUTANTS * sum(len(f) for f in FILES.values())


@pytest.mark.parametrize("index", range(3))
def test_mutated_inputs_in_a_subprocess(tmp_path, seed, index):
    """As a user runs it: no traceback, one line on status 2."""
    rng = random.Random(f"{seed}-{index}")
    kind = rng.choice(["chip", "system"])
    file = rng.choice(FILES[kind])
    text, what = mutate(file.read_text(encoding="utf-8"), rng)
    path = tmp_path / file.name
    path.write_text(text, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "generators.cli", "show", str(path)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    what = f"{file.name} ({what}, seed {seed})"
    assert proc.returncode in (0, 2), f"{what}: {proc.stderr}"
    assert "Traceback" not in proc.stderr, f"{what}: {proc.stderr}"
    if proc.returncode == 2:
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
