"""The machine's one content-addressed store of trngen: simulator builds, emitted units, area
results and kernel times, shared by every checkout and process on the machine.

An entry is a directory named by its key, the hash of everything that decides its content
(the caller's job, with :func:`code_digest` for the code that made it). It holds its files
and ``index.json`` (each file's name, sha256 and mode). An entry is published whole: written
into a directory of the writing process's and renamed into place, so that a reader sees the
whole entry or none; of writers that publish one key at once the first rename wins. Every
read checks each file against its recorded hash, and an entry that fails is treated as
absent (and replaced by the next publication). Reading an entry marks it used; entries not
used for :data:`KEEP_DAYS` days, and what killed writers left behind, are removed when a
process first publishes into that kind of entry. A store that cannot be written costs the
next run the work again, nothing more: no error reaches the caller.

The store lives under :func:`cache_home`, never in a checkout or under site-packages.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

from .files import locked, pid_alive

__all__ = ["KEEP_DAYS", "Store", "cache_home", "code_digest", "code_files"]

#: Entries not used for this many days are removed.
KEEP_DAYS = 30

#: The project's own top-level packages: what :func:`code_digest` follows.
PACKAGES = ("specs", "hdl", "sim", "kernels", "explore", "generators")

ROOT = Path(__file__).resolve().parents[1]


def cache_home() -> Path:
    """The machine's cache of trngen, shared by every checkout: ``$TRNGEN_CACHE``, else
    ``$XDG_CACHE_HOME/trngen``, else ``~/.cache/trngen``."""
    if os.environ.get("TRNGEN_CACHE"):
        return Path(os.environ["TRNGEN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "trngen"


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Store:
    """The entries of one ``kind`` (``sim``, ``chip``, ``area``, ...), in
    ``root / kind``; ``root`` defaults to :func:`cache_home` as it is at each call."""

    #: The kinds whose stale entries this process has removed already.
    _pruned: set[Path] = set()

    def __init__(self, kind: str, root: Path | str | None = None):
        if not re.fullmatch(r"[\w.-]+", kind):
            raise ValueError(f"a store kind is a plain name, not {kind!r}")
        self.kind = kind
        self.root = None if root is None else Path(root)

    @property
    def path(self) -> Path:
        return (cache_home() if self.root is None else self.root) / self.kind

    def entry(self, key: str) -> Path:
        if not re.fullmatch(r"[\w.-]+", key) or key.startswith("."):
            raise ValueError(f"a store key is a plain name, not {key!r}")
        return self.path / key

    def get(self, key: str) -> dict[str, bytes] | None:
        """The entry's files (name -> content, in the order they were published), each
        checked against its hash; None when the store has no intact entry for ``key``."""
        found = self._read(self.entry(key))
        if found is not None:
            with suppress(OSError):
                os.utime(self.entry(key) / "index.json")  # used: spared by the pruning
        return None if found is None else {name: data for name, (data, _) in found.items()}

    def fetch(self, key: str, into: Path) -> list[Path] | None:
        """The entry's files written into the directory ``into`` (each renamed into place,
        with its recorded mode); None, and nothing written, when there is no intact entry."""
        found = self._read(self.entry(key))
        if found is None:
            return None
        paths = []
        try:
            for name, (data, mode) in found.items():
                path = Path(into) / name
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                try:
                    tmp.write_bytes(data)
                    os.chmod(tmp, mode)
                    os.replace(tmp, path)
                finally:
                    tmp.unlink(missing_ok=True)
                paths.append(path)
            os.utime(self.entry(key) / "index.json")
        except OSError:
            return None
        return paths

    def get_json(self, key: str):
        """The JSON value :meth:`put_json` kept under ``key``; None when there is none."""
        found = self.get(key)
        if found is None or "value.json" not in found:
            return None
        try:
            return json.loads(found["value.json"])
        except ValueError:
            return None

    def put(self, key: str, files: Mapping[str, bytes | str | Path], *,
            replace: bool = False) -> bool:
        """Publish ``files`` (name -> content, or the path of a file to copy, whose mode is
        kept) as the entry ``key``. An intact entry already there stays (another process
        published the same content first) unless ``replace``, for entries that record a
        measurement rather than a result. Whether the entry was published here."""
        entry = self.entry(key)
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{key[:24]}.{os.getpid()}.", dir=entry.parent))
            try:
                index = []
                for name, content in files.items():
                    if Path(name).is_absolute() or ".." in Path(name).parts:
                        raise ValueError(f"a store file name is relative, not {name!r}")
                    target = tmp / "files" / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if isinstance(content, Path):
                        shutil.copyfile(content, target)
                        os.chmod(target, content.stat().st_mode & 0o777)
                    else:
                        target.write_bytes(content.encode() if isinstance(content, str)
                                           else content)
                    index.append([name, _hash(target.read_bytes()),
                                  target.stat().st_mode & 0o777])
                (tmp / "index.json").write_text(json.dumps(index) + "\n")
                if entry.exists():
                    if not replace and self._read(entry) is not None:
                        return False
                    old = entry.with_name(f".{key[:24]}.{os.getpid()}.old")
                    with suppress(OSError):
                        os.rename(entry, old)
                    shutil.rmtree(old, ignore_errors=True)
                try:
                    os.rename(tmp, entry)
                except OSError:
                    return False  # another process's entry came first
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            self._prune()
        except OSError:
            return False
        return True

    def put_json(self, key: str, value, *, replace: bool = False) -> bool:
        """:meth:`put` of one JSON value."""
        text = json.dumps(value, indent=1, sort_keys=True) + "\n"
        return self.put(key, {"value.json": text}, replace=replace)

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold the machine-wide lock of ``key`` for the body (for work that several
        processes would otherwise do at once, such as compiling one build)."""
        self.entry(key)  # the key's check
        with locked(self.path / f".{key}.lock"):
            yield

    def _read(self, entry: Path) -> dict[str, tuple[bytes, int]] | None:
        try:
            found = {}
            for name, digest, mode in json.loads((entry / "index.json").read_text()):
                data = (entry / "files" / name).read_bytes()
                if _hash(data) != digest:
                    return None
                found[name] = (data, int(mode))
        except (OSError, ValueError, TypeError):
            return None
        return found

    def _prune(self) -> None:
        """Remove entries unused for :data:`KEEP_DAYS` and the temporaries and locks of
        processes that are gone: once per kind and process."""
        path = self.path
        if path in Store._pruned:
            return
        Store._pruned.add(path)
        cutoff = time.time() - KEEP_DAYS * 86400
        for old in path.iterdir():
            if old.name.startswith("."):
                pid = old.name.split(".")[2] if old.name.count(".") >= 3 else ""
                if pid.isdigit() and not pid_alive(int(pid)):
                    shutil.rmtree(old, ignore_errors=True)
                continue
            with suppress(OSError):
                if (old / "index.json").stat().st_mtime < cutoff:
                    shutil.rmtree(old, ignore_errors=True)


#: An import statement (at any indentation, so the imports inside functions too); a
#: parenthesised list of names may span lines.
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]+)"
                     r"|import[ \t]+([^\n#;]+))", re.M)


def _module_file(name: str) -> Path | None:
    parts = name.split(".")
    if parts[0] not in PACKAGES:
        return None
    base = ROOT.joinpath(*parts)
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _imports(path: Path) -> list[str]:
    """The absolute names of the modules the file at ``path`` imports (relative imports
    resolved; for ``from a import b`` both ``a`` and ``a.b``, which may be a module)."""
    package = path.relative_to(ROOT).with_suffix("").parts
    package = package[:-1]  # a module's package; a package's __init__ is its own package
    out = []
    for match in _IMPORT.finditer(path.read_text(encoding="utf-8")):
        source, names, plain = match.groups()
        if plain is not None:
            out += [n.split(" as ")[0].strip() for n in plain.split(",")]
            continue
        level = len(source) - len(source.lstrip("."))
        base = ".".join(package[:len(package) - level + 1]) if level else ""
        module = ".".join(p for p in (base, source.lstrip(".")) if p)
        out.append(module)
        for name in names.strip("()").replace("\n", " ").split(","):
            name = name.split(" as ")[0].strip()
            if name and name != "*":
                out.append(f"{module}.{name}")
    return out


def _data_files(package: Path) -> list[Path]:
    """The files other than Python sources in a package's directory and in its
    subdirectories that are not packages themselves (templates, bundled specs, tables)."""
    out = []
    for path in sorted(package.iterdir()):
        if path.name.startswith(".") or path.name == "__pycache__":
            continue
        if path.is_dir():
            if not (path / "__init__.py").is_file():
                out += [p for p in sorted(path.rglob("*")) if p.is_file()
                        and "__pycache__" not in p.parts and not p.name.startswith(".")]
        elif path.suffix not in (".py", ".pyc"):
            out.append(path)
    return out


@functools.cache
def code_files(*modules: str) -> tuple[Path, ...]:
    """The project's files that the given modules (absolute names of the project's
    packages) may run or read: every module reached from them through the project's
    import statements, wherever in a module they stand, with each module's enclosing
    packages, and the data files of every package reached."""
    seen: set[Path] = set()
    todo = []
    for name in modules:
        path = _module_file(name)
        if path is None:
            raise ValueError(f"{name!r} is not a module of trngen's packages")
        todo.append(name)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            path = _module_file(".".join(parts[:i]))
            if path is None or path in seen:
                continue
            seen.add(path)
            todo += _imports(path)
    files = set(seen)
    for path in seen:
        if path.name == "__init__.py":
            files.update(_data_files(path.parent))
    return tuple(sorted(files))


@functools.cache
def code_digest(*modules: str) -> str:
    """sha256 of :func:`code_files` of ``modules`` (each file's path in the project and its
    content): what changes when any code or data that those modules can reach changes."""
    digest = hashlib.sha256()
    for path in code_files(*modules):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()
