"""The floors hold: each package imports only itself and the floors below it, no private name
leaves its module, and no package reads another's files by path.

The floors, lowest first (:data:`FLOORS`): specs/ -> hdl/ -> sim/golden/ -> sim/core/ ->
kernels/ and sim/system/ (siblings that never import each other) -> explore/ -> generators/
(emission and datasheets) -> sim/tb/ (the testbenches) -> generators/cli/ (the command line,
which runs them: `gen sim`). tests/ and benchmarks/ may import anything; nothing imports them,
nor a pytest entry point (``test_*``, ``conftest``).

Every module is read with ``ast``: imports inside functions included, relative ones resolved,
so a lazy import cannot hide an edge. Each violation is named by file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The packages by floor, lowest first; packages on one floor never import each other.
FLOORS = (
    ("specs",),
    ("hdl",),
    ("sim/golden",),
    ("sim/core",),
    ("kernels", "sim/system"),
    ("explore",),
    ("generators",),
    ("sim/tb",),
    ("generators/cli",),
)
PACKAGES = {package: rank for rank, floor in enumerate(FLOORS) for package in floor}
#: Code outside the floors, which may import anything and which no package imports.
TEST_CODE = ("tests", "benchmarks", "conftest")

#: Edges that stand until the change named beside each: (file, what it imports or reads).
ALLOWED: set[tuple[str, str]] = set()


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(parts: tuple[str, ...]) -> str | None:
    """The floor package that holds the tree location ``parts`` (the longest match)."""
    for n in range(len(parts), 0, -1):
        if "/".join(parts[:n]) in PACKAGES:
            return "/".join(parts[:n])
    return None


def _is_module(name: str, root: Path) -> bool:
    p = root.joinpath(*name.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(node: ast.ImportFrom, path: Path, root: Path) -> str:
    """The absolute module name of a ``from ... import`` statement in ``path``."""
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[:len(package) - node.level + 1] if node.level else []
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file at ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            name = _resolve(node, path, root)
            out.append((node.lineno, name))
            # `from package import name` imports a module where ``name`` is one
            out += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
    return sorted(out)


def _edge(package: str, name: str) -> str | None:
    """Why ``package`` may not import the module ``name``, or None if it may."""
    parts = name.split(".")
    if parts[0] in TEST_CODE or any(p.startswith("test_") or p == "conftest" for p in parts):
        return "test code"
    other = _package_of(tuple(parts))
    if other is None or other == package:
        return None
    if PACKAGES[other] > PACKAGES[package]:
        return f"{other}/ is above {package}/"
    if PACKAGES[other] == PACKAGES[package]:
        return f"{other}/ is a sibling of {package}/"
    return None


def import_violations(path: Path, root: Path = ROOT) -> list[str]:
    """One line per import statement that leaves the floors, naming its first bad module."""
    rel = path.relative_to(root)
    package = _package_of(rel.parts)
    bad: dict[int, str] = {}
    for line, name in imports(path, root):
        why = _edge(package, name)
        if why and (rel.as_posix(), name) not in ALLOWED:
            bad.setdefault(line, f"{rel.as_posix()}:{line}: imports {name} ({why})")
    return list(bad.values())


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def private_violations(path: Path, root: Path = ROOT) -> list[str]:
    """Private names (``_x``) of another module of the tree, imported (``from m import _x``)
    or used through the module (``m._x``)."""
    rel = path.relative_to(root).as_posix()
    own = _module_name(path, root)
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    modules: dict[str, str] = {}  # local name -> the tree's module it is bound to
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_module(alias.name, root):
                    local = alias.asname or alias.name.split(".")[0]
                    modules[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom):
            name = _resolve(node, path, root)
            if not _is_module(name, root):
                continue
            for alias in node.names:
                if _is_module(f"{name}.{alias.name}", root):
                    modules[alias.asname or alias.name] = f"{name}.{alias.name}"
                elif _private(alias.name) and name != own:
                    bad.append((node.lineno, f"imports {alias.name} from {name}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            dotted = _dotted(node.value)
            head, _, rest = (dotted or "").partition(".")
            if head in modules:
                target = modules[head] + (f".{rest}" if rest else "")
                if _is_module(target, root) and target != own:
                    bad.append((node.lineno, f"uses {target}.{node.attr}"))
    return [f"{rel}:{line}: {what}" for line, what in sorted(set(bad))]


def _is_here(node: ast.expr) -> bool:
    """``Path(__file__)`` (or ``pathlib.Path(__file__)``)."""
    return (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords
            and isinstance(node.args[0], ast.Name) and node.args[0].id == "__file__"
            and (_dotted(node.func) or "").split(".")[-1] == "Path")


def _location(node: ast.expr, here: tuple[str, ...], names: dict) -> tuple[str, ...] | None:
    """The tree location (parts under the root) a path expression built from ``Path(__file__)``
    names, or None where it is not one or cannot be read statically."""
    def join(base, parts):
        if base is None:
            return None
        for part in "/".join(parts).split("/"):
            if part == "..":
                if not base:
                    return None
                base = base[:-1]
            elif part not in ("", "."):
                base = (*base, part)
        return base

    if _is_here(node):
        return here
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        base = _location(node.value, here, names)
        return base[:-1] if base else None
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
            and node.value.attr == "parents" and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, int)):
        base = _location(node.value.value, here, names)
        up = node.slice.value + 1
        return base[:-up] if base is not None and len(base) >= up else None
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
            and isinstance(node.right, ast.Constant) and isinstance(node.right.value, str)):
        return join(_location(node.left, here, names), [node.right.value])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        args = [a.value for a in node.args if isinstance(a, ast.Constant)
                and isinstance(a.value, str)]
        if len(args) != len(node.args) or node.keywords:
            return None
        base = _location(node.func.value, here, names)
        if node.func.attr in ("resolve", "absolute") and not args:
            return base
        if node.func.attr == "joinpath":
            return join(base, args)
        if node.func.attr == "with_name" and len(args) == 1 and base:
            return join(base[:-1], args)
    return None


def path_violations(path: Path, root: Path = ROOT) -> list[str]:
    """Paths built from ``Path(__file__)`` that climb out of the file's package into another
    package's directory (names bound to such paths are followed)."""
    rel = path.relative_to(root)
    here = rel.parts
    package = _package_of(here)
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names: dict[str, tuple[str, ...]] = {}
    assigns = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Assign)),
                     key=lambda n: (n.lineno, n.col_offset))
    for node in assigns:
        where = _location(node.value, here, names)
        for target in node.targets:
            if isinstance(target, ast.Name) and where is not None:
                names[target.id] = where
    bad: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            continue
        where = _location(node, here, names)
        if where is None or _package_of(where) in (None, package):
            continue
        target = "/".join(where)
        if len(target) > len(bad.get(node.lineno, "")):
            bad[node.lineno] = target
    return [f"{rel.as_posix()}:{line}: reads {target} by path"
            for line, target in sorted(bad.items()) if (rel.as_posix(), target) not in ALLOWED]


def violations(path: Path, root: Path = ROOT) -> list[str]:
    """Every way the module at ``path`` leaves its floor."""
    return (import_violations(path, root) + private_violations(path, root)
            + path_violations(path, root))


MODULES = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")
                 if _package_of(p.relative_to(ROOT).parts) == package)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_each_module_keeps_its_floor(path):
    assert violations(path) == []


def test_every_module_has_a_floor():
    """No product module escapes the check: each module of the installed packages lies in a
    package of :data:`FLOORS` (the ``sim`` namespace package aside, which holds four)."""
    loose = [p.relative_to(ROOT).as_posix() for top in ROOT.glob("*/__init__.py")
             for p in top.parent.rglob("*.py")
             if _package_of(p.relative_to(ROOT).parts) is None]
    assert loose == ["sim/__init__.py"]


def test_the_check_sees_every_kind_of_violation(tmp_path):
    """The checker itself: upward, sibling, lazy, relative and test-module imports; private
    names imported and used through a module; reads by path into another package."""
    files = {
        "hdl/unit/__init__.py": "",
        "hdl/unit/own.py": "_SIZE = 4\n",
        "hdl/unit/bad.py": ("import numpy\n"
                            "from specs.model import ChipSpec\n"
                            "def f():\n"
                            "    from generators.vector import emit\n"
                            "from ..vector import fitting\n"
                            "from sim.tb.test_systolic import simulate\n"
                            "import explore.model as m\n"
                            "from sim.golden import test_helpers\n"
                            "from . import conftest\n"),
        "kernels/__init__.py": "",
        "kernels/attention.py": "_KB = 512\n",
        "sim/system/__init__.py": "",
        "sim/system/execute.py": ("import kernels\n"
                                  "from kernels.attention import _KB\n"
                                  "from kernels import attention as a\n"
                                  "from pathlib import Path\n"
                                  "import pathlib\n"
                                  "x = a._KB + attention._KB\n"
                                  "import kernels.attention\n"
                                  "y = kernels.attention._KB\n"
                                  "T = Path(__file__).resolve().parents[2] / 'generators'\n"
                                  "U = T / 'templates'\n"
                                  "V = pathlib.Path(__file__).parent.parent.joinpath('golden')\n"
                                  "W = Path(__file__).with_name('model.py')\n"
                                  "B = Path(__file__).parents[2] / 'build'\n"),
        "sim/tb/bench.py": "from hdl.unit.own import _SIZE\nimport tests.conftest\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    bad = tmp_path / "hdl" / "unit" / "bad.py"
    assert violations(bad, tmp_path) == [
        "hdl/unit/bad.py:4: imports generators.vector (generators/ is above hdl/)",
        "hdl/unit/bad.py:6: imports sim.tb.test_systolic (test code)",
        "hdl/unit/bad.py:7: imports explore.model (explore/ is above hdl/)",
        "hdl/unit/bad.py:8: imports sim.golden (sim/golden/ is above hdl/)",
        "hdl/unit/bad.py:9: imports hdl.unit.conftest (test code)",
    ]
    assert ("5", "hdl.vector.fitting") in {(str(n), m) for n, m in imports(bad, tmp_path)}
    assert violations(tmp_path / "sim" / "system" / "execute.py", tmp_path) == [
        "sim/system/execute.py:1: imports kernels (kernels/ is a sibling of sim/system/)",
        "sim/system/execute.py:2: imports kernels.attention (kernels/ is a sibling of "
        "sim/system/)",
        "sim/system/execute.py:3: imports kernels (kernels/ is a sibling of sim/system/)",
        "sim/system/execute.py:7: imports kernels.attention (kernels/ is a sibling of "
        "sim/system/)",
        "sim/system/execute.py:2: imports _KB from kernels.attention",
        "sim/system/execute.py:6: uses kernels.attention._KB",
        "sim/system/execute.py:8: uses kernels.attention._KB",
        "sim/system/execute.py:9: reads generators by path",
        "sim/system/execute.py:10: reads generators/templates by path",
        "sim/system/execute.py:11: reads sim/golden by path",
    ]
    assert violations(tmp_path / "sim" / "tb" / "bench.py", tmp_path) == [
        "sim/tb/bench.py:2: imports tests.conftest (test code)",
        "sim/tb/bench.py:1: imports _SIZE from hdl.unit.own",
    ]
    assert violations(tmp_path / "hdl" / "unit" / "own.py", tmp_path) == []
