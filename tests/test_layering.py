"""Layers point down: the lower floors never import the ones above them, nor a test module.

specs/ -> hdl/ -> sim/golden/ -> sim/system/, kernels/ -> explore/ -> generators/ and the CLI;
sim/tb/ on top. Every import statement of every module under specs/, hdl/ and sim/golden/ is
read with ``ast`` (imports inside functions included, relative ones resolved), so a lazy import
cannot hide an upward dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOW_FLOORS = ("specs", "hdl", "sim/golden", "sim/core")
#: Packages above the low floors, and test code, which product code never imports.
FORBIDDEN = ("generators", "explore", "sim.system", "sim.tb", "kernels", "tests", "benchmarks")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file at ``path``."""
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            name = ".".join(base + ([node.module] if node.module else []))
            out.append((node.lineno, name))
            # `from package import name` imports a module where ``name`` is one
            out += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
    return sorted(out)


def violations(path: Path, root: Path = ROOT) -> list[str]:
    """One line per offending import statement, naming the first module above the floor."""
    bad: dict[int, str] = {}
    for line, name in imports(path, root):
        parts = name.split(".")
        test_module = any(part.startswith("test_") or part == "conftest" for part in parts)
        if test_module or any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
            bad.setdefault(line, f"{path.relative_to(root)}:{line}: imports {name}")
    return list(bad.values())


MODULES = sorted(p for floor in LOW_FLOORS for p in (ROOT / floor).rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_low_floors_import_nothing_above(path):
    assert violations(path) == []


def test_the_check_sees_upward_imports(tmp_path):
    """The checker itself: lazy, relative and test-module imports are all caught."""
    pkg = tmp_path / "hdl" / "unit"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    bad = pkg / "bad.py"
    bad.write_text("import numpy\n"
                   "from specs.model import ChipSpec\n"
                   "def f():\n"
                   "    from generators.vector import emit\n"
                   "from ..vector import fitting\n"
                   "from sim.tb.test_systolic import simulate\n"
                   "import explore.model as m\n"
                   "from sim.golden import test_helpers\n"
                   "from . import conftest\n")
    assert violations(bad, tmp_path) == [
        "hdl/unit/bad.py:4: imports generators.vector",
        "hdl/unit/bad.py:6: imports sim.tb.test_systolic",
        "hdl/unit/bad.py:7: imports explore.model",
        "hdl/unit/bad.py:8: imports sim.golden.test_helpers",
        "hdl/unit/bad.py:9: imports hdl.unit.conftest",
    ]
    assert ("5", "hdl.vector.fitting") in {(str(n), m) for n, m in imports(bad, tmp_path)}


PRODUCT = sorted(p for floor in ("generators", "explore", "sim/system", "kernels", "sim/tb")
                 for p in (ROOT / floor).rglob("*.py") if not p.name.startswith("test_"))


@pytest.mark.parametrize("path", PRODUCT, ids=lambda p: str(p.relative_to(ROOT)))
def test_product_code_imports_no_test_module(path):
    """gen sim and the benches reach a testbench through its non-test module
    (``sim/tb/systolic.py``), never through the pytest entry points."""
    bad = [f"{path.relative_to(ROOT)}:{line}: imports {name}" for line, name in imports(path)
           if any(part.startswith("test_") or part == "conftest" for part in name.split("."))]
    assert bad == []
