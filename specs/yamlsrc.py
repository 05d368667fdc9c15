"""Safe YAML with source positions.

YAML is composed into nodes with PyYAML's safe machinery and built into plain dicts, lists and
scalars by hand, which lets the loader

- remember the line and column of every key and value (``Positions``),
- reject duplicate keys (PyYAML keeps the last one silently),
- reject every tag that would build an object (only the core schema's tags are accepted),
- stop alias bombs: the values built may number at most ``MAX_NODES``.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .errors import Location, SpecError

MAX_NODES = 100_000
MAX_DEPTH = 64
MAX_BYTES = 4 * 1024 * 1024

_CORE = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_CORE + t for t in ("str", "int", "float", "bool", "null")}

KeyPath = tuple


class Positions:
    """Key path -> Location of the value (and of the key, for mappings' entries)."""

    def __init__(self) -> None:
        self.values: dict[KeyPath, Location] = {}
        self.keys: dict[KeyPath, Location] = {}

    def update(self, other: Positions) -> None:
        self.values.update(other.values)
        self.keys.update(other.keys)

    def of(self, path: KeyPath, key: bool = False) -> Location | None:
        """Position of ``path``, or of its nearest ancestor that has one."""
        table = self.keys if key else self.values
        path = tuple(path)
        while True:
            if path in table:
                return table[path]
            if path in self.values:
                return self.values[path]
            if not path:
                return None
            path = path[:-1]


def _loc(file: Path, mark) -> Location:
    return Location(file, mark.line + 1, mark.column + 1)


def format_path(path: KeyPath) -> str:
    """``path`` as errors name it: keys dotted, list indices in brackets
    (``chip.cores[0].rows``)."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


class _Builder:
    def __init__(self, file: Path):
        self.file = file
        self.count = 0
        self.pos = Positions()
        self.resolver = yaml.resolver.Resolver()
        self.constructor = yaml.constructor.SafeConstructor()

    def build(self, node, path: KeyPath):
        self.count += 1
        if self.count > MAX_NODES:
            raise SpecError(
                f"expected at most {MAX_NODES:,} values, found more (alias expansion bomb?)",
                location=_loc(self.file, node.start_mark), path=format_path(path))
        if len(path) > MAX_DEPTH:
            raise SpecError(f"expected nesting at most {MAX_DEPTH} deep, found deeper "
                            "(a recursive alias?)",
                            location=_loc(self.file, node.start_mark), path=format_path(path[:3]))
        self.pos.values[path] = _loc(self.file, node.start_mark)
        if isinstance(node, yaml.MappingNode):
            if node.tag != _CORE + "map":
                self._bad_tag(node, path)
            out = {}
            for key_node, value_node in node.value:
                if key_node.tag == _CORE + "merge":
                    raise SpecError("expected a plain key, found a '<<' merge key "
                                    "(use 'extends:' to share fields)",
                                    location=_loc(self.file, key_node.start_mark),
                                    path=format_path(path))
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag not in (
                        _CORE + "str", _CORE + "int"):
                    raise SpecError("expected a string key, found a "
                                    f"{type(key_node).__name__.removesuffix('Node').lower()}",
                                    location=_loc(self.file, key_node.start_mark),
                                    path=format_path(path))
                key = str(key_node.value)
                if key in out:
                    first = self.pos.keys[path + (key,)]
                    raise SpecError(f"duplicate key {key!r} (first at line {first.line})",
                                    location=_loc(self.file, key_node.start_mark),
                                    path=format_path(path + (key,)))
                self.pos.keys[path + (key,)] = _loc(self.file, key_node.start_mark)
                out[key] = self.build(value_node, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _CORE + "seq":
                self._bad_tag(node, path)
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        if node.tag not in _SCALAR_TAGS:
            self._bad_tag(node, path)
        return self.constructor.construct_object(node, deep=True)

    def _bad_tag(self, node, path):
        raise SpecError(f"expected plain YAML data, found the tag {node.tag!r} "
                        "(tags that build objects are not allowed)",
                        location=_loc(self.file, node.start_mark), path=format_path(path))


def _deep_point(file: Path, text: str) -> Location:
    """Where flow collections (``[``, ``{``) first nest deeper than MAX_DEPTH, or where block
    indentation first goes deeper than MAX_DEPTH levels of two spaces; the file alone when
    neither does (quoted text is not told apart: this only places the message)."""
    depth = 0
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) - len(line.lstrip(" ")) > 2 * MAX_DEPTH:
            return Location(file, number, 2 * MAX_DEPTH + 1)
        for column, char in enumerate(line, 1):
            depth += (char in "[{") - (char in "]}")
            if depth > MAX_DEPTH:
                return Location(file, number, column)
    return Location(file)


#: libyaml's parser where PyYAML was built with it: the same nodes and marks as the pure-Python
#: parser's, in a tenth of the time.
_FAST_LOADER = getattr(yaml, "CSafeLoader", None)


def _compose(text: str) -> list:
    """The documents of ``text`` as YAML nodes. A text libyaml refuses is parsed again by the
    pure-Python parser, whose errors (message and mark) are the ones reported."""
    if _FAST_LOADER is not None:
        try:
            return list(yaml.compose_all(text, Loader=_FAST_LOADER))
        except yaml.YAMLError:
            pass
    return list(yaml.compose_all(text, Loader=yaml.SafeLoader))


def load_yaml(file: Path) -> tuple[object, Positions]:
    """Load one YAML document from ``file``; return the data and its positions."""
    file = Path(file)
    if file.is_dir():
        raise SpecError("expected a YAML file, found a directory", location=Location(file))
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise SpecError("expected an existing file, found none", location=Location(file)) from None
    except OSError as exc:
        raise SpecError(f"cannot be read ({exc.strerror})", location=Location(file)) from None
    if len(raw) > MAX_BYTES:
        raise SpecError(f"expected at most {MAX_BYTES:,} bytes, found {len(raw):,}",
                        location=Location(file))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecError(f"expected UTF-8 text, found the byte 0x{raw[exc.start]:02x}",
                        location=Location(file, line, col)) from None
    text = text.removeprefix("\ufeff")
    try:
        nodes = _compose(text)
    except RecursionError:   # the YAML parser recurses per level, before our depth check
        raise SpecError(f"expected nesting at most {MAX_DEPTH} deep, found deeper",
                        location=_deep_point(file, text)) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(filter(None, [exc.context, exc.problem]))
        raise SpecError(f"YAML syntax error: {what}",
                        location=_loc(file, mark) if mark else Location(file)) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"YAML error: {exc}", location=Location(file)) from None
    nodes = [n for n in nodes if n is not None]
    if not nodes:
        raise SpecError("expected a YAML mapping, found an empty file", location=Location(file))
    if len(nodes) > 1:
        raise SpecError("expected one YAML document, found several",
                        location=_loc(file, nodes[1].start_mark))
    builder = _Builder(file)
    data = builder.build(nodes[0], ())
    if not isinstance(data, dict):
        raise SpecError(f"expected a mapping at the top level, found {type(data).__name__}",
                        location=_loc(file, nodes[0].start_mark))
    return data, builder.pos
