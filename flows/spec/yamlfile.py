"""Read one YAML file into plain data plus the line of every key, or fail with a located error.

PyYAML's constructors forget where values came from, so this walks the composed node graph
itself: each mapping key and list item is recorded with its 1-based line. Duplicate keys,
recursive aliases and alias bombs are refused here, since the models could not report them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from flows.bounded_read import read_regular
from flows.errors import SpecError
from flows.spec.base import Loc

MAX_NODES = 100_000
"""Upper bound on values built from one file: aliases can otherwise expand exponentially."""

MAX_BYTES = 1 << 20
"""Upper bound on a spec file's size, checked before parsing: no spec is near it, and parsing
megabytes of YAML costs seconds and hundreds of MB before any other limit could refuse it."""

MAX_DEPTH = 64
"""Upper bound on nesting: deeper data is never a spec, and the parser recurses per level."""


class ParsedFile:
    """A file's data and, for each key path, the line it was written on."""

    def __init__(self, path: Path, data: Any, lines: dict[Loc, int]) -> None:
        self.path = path
        self.data = data
        self.lines = lines


def read_yaml(path: Path) -> ParsedFile:
    """Parse `path`; raises SpecError for a missing file, bad YAML or an unusable structure."""
    try:
        raw = read_regular(path, MAX_BYTES)  # a FIFO or a device is refused, not read
        if len(raw) > MAX_BYTES:
            raise SpecError(
                f"file too large (over {MAX_BYTES} bytes)", file=path, expected="a smaller spec"
            )
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise SpecError("file not found", file=path, expected="an existing YAML file") from None
    except IsADirectoryError:
        raise SpecError("is a directory", file=path, expected="a YAML file") from None
    except UnicodeDecodeError as error:
        raise SpecError(f"not UTF-8 text ({error.reason})", file=path) from None
    except OSError as error:
        raise SpecError(f"cannot read: {error.strerror}", file=path) from None
    return parse_yaml(text, path)


def parse_yaml(text: str, path: Path) -> ParsedFile:
    """Parse YAML text that claims to come from `path` (used in messages only)."""
    if len(text) > MAX_BYTES:
        raise SpecError(f"file too large (over {MAX_BYTES} bytes)", file=path)
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        builder = _Builder(loader, path)
        data = None if node is None else builder.build(node, ())
        return ParsedFile(path, data, builder.lines)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = error.problem or error.context or "syntax error"
        raise SpecError(f"invalid YAML: {problem}", file=path, line=line) from None
    except yaml.reader.ReaderError as error:
        line = text.count("\n", 0, error.position) + 1
        message = f"invalid YAML: character {error.character:#x} is not allowed ({error.reason})"
        raise SpecError(message, file=path, line=line) from None
    except yaml.YAMLError as error:
        raise SpecError(f"invalid YAML: {error}", file=path) from None
    except RecursionError:
        message = f"invalid YAML: nested too deeply (more than {MAX_DEPTH} levels)"
        raise SpecError(message, file=path) from None
    finally:
        if loader is not None:
            loader.dispose()


class _Builder:
    """Builds data from nodes, recording lines; one instance per parsed document."""

    def __init__(self, loader: yaml.SafeLoader, path: Path) -> None:
        self.loader = loader
        self.path = path
        self.lines: dict[Loc, int] = {}
        self.active: set[int] = set()
        self.count = 0

    def build(self, node: yaml.Node, loc: Loc) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            self._fail(node, loc, f"more than {MAX_NODES} values (alias expansion?)")
        if len(loc) > MAX_DEPTH:
            self._fail(node, loc[:MAX_DEPTH], f"nested more than {MAX_DEPTH} levels deep")
        self.lines.setdefault(loc, node.start_mark.line + 1)
        if id(node) in self.active:
            self._fail(node, loc, "recursive alias", "an alias to a value defined earlier")
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, loc)
            if isinstance(node, yaml.SequenceNode):
                return [self.build(item, (*loc, i)) for i, item in enumerate(node.value)]
            return self._scalar(node, loc)
        finally:
            self.active.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, loc: Loc) -> dict[Any, Any]:
        self.loader.flatten_mapping(node)
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                self._fail(key_node, loc, "a key must be a plain value", "a string key")
            key = self._scalar(key_node, loc)
            if isinstance(key, bytes) or not isinstance(key, str | int | float | bool | None):
                self._fail(key_node, loc, f"unusable key {key!r}", "a string key")
            child: Loc = (*loc, key)
            if key in result:
                self._fail(key_node, child, "duplicate key", "each key once per mapping")
            self.lines[child] = key_node.start_mark.line + 1
            result[key] = self.build(value_node, child)
        return result

    def _scalar(self, node: yaml.Node, loc: Loc) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except (ValueError, OverflowError) as error:
            self._fail(node, loc, f"invalid value: {error}")

    def _fail(self, node: yaml.Node, loc: Loc, message: str, expected: str | None = None) -> Any:
        raise SpecError(
            message,
            file=self.path,
            line=node.start_mark.line + 1,
            key=format_loc(loc),
            expected=expected,
        )


def format_loc(loc: Loc) -> str:
    """Render a key path the way messages show it: `nodes[1].rank`."""
    text = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text
