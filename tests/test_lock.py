"""requirements.lock covers the tree, agrees with pyproject.toml and is what is installed.

./gen installs exactly the releases that requirements.lock names, each checked against its
hashes. These tests hold the lock to the code: every third-party package that the product and
test code import (anywhere in a module, inside functions too) is declared in pyproject.toml and
pinned in the lock with hashes; every requirement of pyproject.toml (dependencies, every
optional group, the build backend) is pinned at a release its specifier accepts; and the
environment running the tests has the lock's releases installed.
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from kernels.nki import INTERFACES

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements.lock"
#: The product and test code whose imports the lock must cover.
SOURCES = ("specs", "hdl", "sim", "kernels", "explore", "generators", "tests", "benchmarks",
           "conftest.py")


@dataclass(frozen=True)
class Pin:
    version: Version
    marker: Marker | None
    hashes: tuple[str, ...]


def _lock() -> dict[NormalizedName, Pin]:
    """The lock's pins by normalised name; each must be one exact release with hashes."""
    logical, line = [], ""
    for raw in LOCK.read_text(encoding="utf-8").splitlines():
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        line += " " + text.removesuffix("\\")
        if not text.endswith("\\"):
            logical.append(line.strip())
            line = ""
    assert not line, "the lock ends in a continued line"
    pins = {}
    for entry in logical:
        requirement, *hashes = (part.strip() for part in entry.split("--hash="))
        req = Requirement(requirement)
        (spec,) = req.specifier
        assert spec.operator == "==", f"{req}: not pinned to one release"
        assert hashes and all(h.startswith("sha256:") for h in hashes), f"{req}: no hashes"
        name = canonicalize_name(req.name)
        assert name not in pins, f"{name} pinned twice"
        pins[name] = Pin(Version(spec.version), req.marker, tuple(hashes))
    return pins


def _pyproject() -> dict:
    with open(REPO / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)


def _declared() -> list[Requirement]:
    """Every requirement of pyproject.toml: dependencies and every optional group."""
    project = _pyproject()["project"]
    groups = [project["dependencies"], *project["optional-dependencies"].values()]
    return [Requirement(r) for group in groups for r in group]


def _declared_names() -> set[NormalizedName]:
    """The distributions pyproject.toml declares, with those a declared extra brings
    (``dask[distributed]`` declares distributed)."""
    names = set()
    for req in _declared():
        names.add(canonicalize_name(req.name))
        for extra in req.extras:
            for dep in map(Requirement, importlib.metadata.requires(req.name) or ()):
                if dep.marker is not None and dep.marker.evaluate({"extra": extra}):
                    names.add(canonicalize_name(dep.name))
    return names


def _own(name: str, importer: Path) -> bool:
    """``name`` is the project's: a package or module at the repository root (the project's
    packages, the root conftest) or beside the importing file, or one of the NKI interface's
    names that the project provides to the kernels it runs (:data:`kernels.nki.INTERFACES`)."""
    return name in INTERFACES or any(
        (d / name / "__init__.py").is_file() or (d / f"{name}.py").is_file()
        for d in (REPO, importer.parent))


def _imports() -> dict[str, set[str]]:
    """Each third-party top-level module that the sources import, with the files importing it."""
    found: dict[str, set[str]] = {}
    files = [p for s in SOURCES for p in ([REPO / s] if s.endswith(".py")
                                          else sorted((REPO / s).rglob("*.py")))]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for top in {n.partition(".")[0] for n in names}:
                if top not in sys.stdlib_module_names and not _own(top, path):
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def test_the_scan_sees_imports_at_module_level_and_inside_functions():
    # amaranth at the top of many modules; wasmtime (generators/chip.py) and platformdirs
    # (hdl/area.py) only inside functions; the project's own packages and the stdlib never
    found = _imports()
    assert {"amaranth", "wasmtime", "platformdirs"} <= found.keys()
    assert not {"hdl", "specs", "generators", "conftest", "json", "ast"} & found.keys()


def test_every_third_party_import_is_declared_and_locked_with_hashes():
    pins = _lock()
    declared = _declared_names()
    providers = importlib.metadata.packages_distributions()
    missing = []
    for module, importers in sorted(_imports().items()):
        dists = {canonicalize_name(d) for d in providers.get(module, ())}
        if not dists & declared or not dists & pins.keys():
            missing.append(f"{module} (from {', '.join(sorted(importers)[:3])}): "
                           f"distributions {sorted(dists) or 'none installed'}")
    assert not missing, "imported but not declared in pyproject.toml and locked:\n" + \
        "\n".join(missing)


def test_every_requirement_of_pyproject_is_locked_at_an_accepted_release():
    pins = _lock()
    build = [Requirement(r) for r in _pyproject()["build-system"]["requires"]]
    wrong = []
    for req in [*_declared(), *build, Requirement("pip")]:
        pin = pins.get(canonicalize_name(req.name))
        if pin is None or not req.specifier.contains(pin.version, prereleases=True):
            wrong.append(f"{req}: locked {pin.version if pin else 'not at all'}")
    assert not wrong, "\n".join(wrong)


def test_the_installed_releases_are_the_locked_ones():
    pins = _lock()
    differ = []
    for name, pin in sorted(pins.items()):
        if pin.marker is not None and not pin.marker.evaluate():
            continue
        try:
            installed = Version(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != pin.version:
            differ.append(f"{name}: locked {pin.version}, installed {installed}")
    assert not differ, "run ./gen to install the lock:\n" + "\n".join(differ)
