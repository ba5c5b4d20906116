"""Load a spec file into a validated model: overlays, relative paths and located errors.

Any mapping, at any depth, may be written as `extends: FILE` plus an optional `set:` mapping:
it then stands for the content of FILE (its `kind` dropped), deep-merged with `set` (mappings
merge key by key; lists and values replace). An optional `unset:` list of dotted key paths
removes keys of FILE first (an overlay for a shape that sets fewer variables than its base); a
path naming no key is an error, so a typo cannot pass unnoticed. FILE is relative to the file
that names it, cycles are refused. Every value keeps the file and line it came from, so a
pydantic error on the merged data becomes `FILE:LINE: key.path: what is wrong (expected ...)`
for the file that set it. Fields typed `SpecPath` are made absolute against the file that
declared them.

Every `extends` target and every SpecPath must resolve, symlinks followed, inside the project:
the closest folder above the top-level file that holds `config/` (the folder the file is in when
none does) or the checkout sparkgate runs from (`project_root()`). Absolute, `~` and `../` paths
that leave it are refused before anything is read from them, so an error message can never echo
a value from a file outside the project (a registry token in ~/.docker/config.json, say).
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from flows.errors import MultipleSpecError, SpecError
from flows.settings import project_root
from flows.spec.base import (
    Loc,
    SpecContext,
    SpecModel,
    SpecPathMarker,
    expand_home,
    inside,
    shown,
)
from flows.spec.errors import spec_errors
from flows.spec.yamlfile import format_loc, read_yaml

M = TypeVar("M", bound=BaseModel)

OVERLAY_KEYS = frozenset({"extends", "set", "unset"})

SHIPPED_ROOT = Path(__file__).resolve().parents[2]
"""The checkout this package was loaded from (its config/ and releases/ are always usable)."""


@dataclass(frozen=True)
class Origin:
    """Where a value was written."""

    file: Path
    line: int


@dataclass
class Document:
    """Merged data of a file and its overlays, with the origin of every key path."""

    path: Path
    data: Any
    origins: dict[Loc, Origin]

    def origin_of(self, loc: Loc) -> Origin:
        """Origin of `loc`, or of its closest parent that was written somewhere."""
        for end in range(len(loc), -1, -1):
            origin = self.origins.get(loc[:end])
            if origin is not None:
                return origin
        return Origin(self.path, 1)


def load_document(path: Path | str) -> Document:
    """Read `path` and expand every `extends`; raises SpecError for any problem."""
    return _load(_clean(Path(path)), ())


def load_model(path: Path | str, model: type[M]) -> M:
    """Load `path` as `model`; every error is a SpecError (MultipleSpecError for several)."""
    document = load_document(path)
    return validate_document(document, model)


def located(error: SpecError, *files: Path | str) -> SpecError:
    """An error raised after loading, which knows only its key (a model's property, a build, a
    render), pointed at the first of `files` that sets the key's first part (else the first
    file), at the line that set the key when that file sets it, as the loader's own errors are.

    An error that already names its file, or one with no file to point at, stays as it is.
    """
    if error.file is not None or not files:
        return error
    loc: Loc = tuple(int(part) if part.isdigit() else part for part in error.key.split(".") if part)
    documents = (load_document(file) for file in files)
    document = next((d for d in documents if loc[:1] in d.origins), None)
    document = document or load_document(files[0])
    exact = document.origins.get(loc) if loc else None
    return SpecError(
        error.message,
        file=document.origin_of(loc).file,
        line=exact.line if exact is not None else None,
        key=error.key,
        expected=error.expected,
    )


def validate_document(document: Document, model: type[M]) -> M:
    """Validate merged data as `model`, make its SpecPath fields absolute and confine them."""
    instance = _validate(document, require_mapping(document), model)
    relative = [(loc, p) for loc, p in spec_paths(instance) if not p.expanduser().is_absolute()]
    if relative:
        data = _deep_copy(document.data)
        for loc, path in relative:
            base = document.origin_of(loc).file.parent
            _assign(data, loc, str((base / path.expanduser()).resolve()))
        instance = _validate(document, data, model)
    roots = project_roots(document.path)
    for loc, path in spec_paths(instance, confined_only=True):
        if not inside(path, roots):
            origin = document.origin_of(loc)
            raise SpecError(
                f"{shown(path)} is outside the project",
                file=origin.file,
                line=origin.line,
                key=format_loc(loc),
                expected=_inside_text(roots),
            )
    return instance


def project_roots(spec_file: Path) -> tuple[Path, ...]:
    """The folders the paths of the spec at `spec_file` may point into (resolved).

    The spec's own project (the closest folder above it holding `config/`, else its folder),
    the project sparkgate runs for (`project_root()`) and the checkout sparkgate itself comes
    from (its shipped config/, releases/ and engine/), which a spec kept elsewhere may build on.
    """
    here = spec_file.resolve().parent
    own = next((folder for folder in (here, *here.parents) if (folder / "config").is_dir()), here)
    roots = [own, project_root()]
    if (SHIPPED_ROOT / "config").is_dir():
        roots.append(SHIPPED_ROOT)
    return tuple(dict.fromkeys(roots))


def _inside_text(roots: tuple[Path, ...]) -> str:
    return "a path inside the project (" + ", ".join(shown(root) for root in roots) + ")"


def require_mapping(document: Document) -> dict[Any, Any]:
    """The document's data; a SpecError unless it is a mapping."""
    if not isinstance(document.data, dict):
        raise SpecError(
            "the file must be a mapping",
            file=document.path,
            line=document.origin_of(()).line,
            expected="`kind: ...` and the keys of that kind",
        )
    return document.data


def _validate(document: Document, data: dict[Any, Any], model: type[M]) -> M:
    try:
        return model.model_validate(
            data, context=SpecContext(file=document.path, roots=project_roots(document.path))
        )
    except ValidationError as error:
        errors = spec_errors(error, data, model, document.origin_of)
    if len(errors) == 1:
        raise errors[0]
    raise MultipleSpecError(errors)


def _clean(path: Path) -> Path:
    return Path(os.path.normpath(path))


def _load(path: Path, chain: tuple[Path, ...]) -> Document:
    parsed = read_yaml(path)
    data, origins = _expand(parsed.data, (), parsed.lines, path, (*chain, path))
    return Document(path, data, origins)


def _expand(
    value: Any, src: Loc, lines: dict[Loc, int], path: Path, chain: tuple[Path, ...]
) -> tuple[Any, dict[Loc, Origin]]:
    """Expand overlays inside `value` (found at `src` in `path`); origins relative to it."""
    here = Origin(path, _line(lines, src))
    if isinstance(value, dict):
        if "extends" in value:
            return _overlay(value, src, lines, path, chain)
        data: dict[Any, Any] = {}
        origins: dict[Loc, Origin] = {(): here}
        for key, item in value.items():
            data[key], sub = _expand(item, (*src, key), lines, path, chain)
            origins.update({(key, *loc): origin for loc, origin in sub.items()})
        return data, origins
    if isinstance(value, list):
        items: list[Any] = []
        origins = {(): here}
        for index, item in enumerate(value):
            built, sub = _expand(item, (*src, index), lines, path, chain)
            items.append(built)
            origins.update({(index, *loc): origin for loc, origin in sub.items()})
        return items, origins
    return value, {(): here}


def _overlay(
    value: dict[Any, Any], src: Loc, lines: dict[Loc, int], path: Path, chain: tuple[Path, ...]
) -> tuple[Any, dict[Loc, Origin]]:
    allowed = OVERLAY_KEYS | ({"kind"} if not src else set())
    for key in value:
        if key not in allowed:
            raise _error(
                "only `set` and `unset` may accompany `extends`",
                path,
                lines,
                (*src, key),
                expected=", ".join(sorted(allowed)),
            )
    extends_loc = (*src, "extends")
    base_path = _base_file(value["extends"], path, lines, extends_loc, chain)
    if base_path.resolve() in {seen.resolve() for seen in chain}:
        cycle = " -> ".join(str(seen) for seen in (*chain, base_path))
        raise _error(f"extends cycle: {cycle}", path, lines, extends_loc)
    try:
        base = _load(base_path, chain)
    except SpecError as error:
        if error.file == str(base_path) and error.line is None:  # the base file itself is unusable
            raise _error(f"{error.message}: {base_path}", path, lines, extends_loc) from None
        raise
    if not isinstance(base.data, dict):
        raise _error(f"{base_path} is not a mapping", path, lines, extends_loc)
    base_data = dict(base.data)
    base_kind = base_data.pop("kind", None)
    base_origins = {loc: o for loc, o in base.origins.items() if loc[:1] != ("kind",)}
    base_origins = _unset(value, (base_data, base_origins), src, lines, (path, base_path))
    overlay = value.get("set", {})
    if overlay is None:
        overlay = {}
    if not isinstance(overlay, dict):
        raise _error("must be a mapping", path, lines, (*src, "set"), expected="keys to override")
    over_data, over_origins = _expand(overlay, (*src, "set"), lines, path, chain)
    data, origins = merge(base_data, base_origins, over_data, over_origins)
    origins[()] = Origin(path, _line(lines, extends_loc))
    if src:
        return data, origins
    return _with_kind(value, (base_kind, base_path), data, origins, lines)


def _base_file(
    target: object, path: Path, lines: dict[Loc, int], extends_loc: Loc, chain: tuple[Path, ...]
) -> Path:
    """The file an `extends` names: relative to the overlay, inside the project."""
    if not isinstance(target, str) or not target.strip():
        raise _error("must name a file", path, lines, extends_loc, expected="a relative path")
    try:
        base_path = _clean(path.parent / expand_home(Path(target)))
    except ValueError as error:
        raise _error(str(error), path, lines, extends_loc, expected="a relative path") from None
    roots = project_roots(chain[0])
    if not inside(base_path, roots):  # refused before reading: nothing of it can be echoed
        raise _error(
            f"{target} is outside the project", path, lines, extends_loc, _inside_text(roots)
        )
    return base_path


def _unset(
    value: dict[Any, Any],
    base: tuple[dict[Any, Any], dict[Loc, Origin]],
    src: Loc,
    lines: dict[Loc, int],
    files: tuple[Path, Path],
) -> dict[Loc, Origin]:
    """Remove the overlay's `unset:` keys from the base data (in place); the origins left."""
    data, origins = base
    path, base_path = files
    for index, dotted in enumerate(_unset_paths(value, src, lines, path)):
        keys = tuple(dotted.split("."))
        if not _remove(data, keys):
            raise _error(
                f"{dotted} names no key of {base_path}", path, lines, (*src, "unset", index),
                expected="a dotted key path of the extended file",
            )  # fmt: skip
        origins = {loc: o for loc, o in origins.items() if loc[: len(keys)] != keys}
    return origins


def _unset_paths(value: dict[Any, Any], src: Loc, lines: dict[Loc, int], path: Path) -> list[str]:
    """The overlay's `unset:` list (empty when absent); SpecError unless a list of key paths."""
    paths = value.get("unset") or []
    if not isinstance(paths, list) or not all(isinstance(p, str) and p.strip() for p in paths):
        raise _error(
            "must be a list of dotted key paths", path, lines, (*src, "unset"),
            expected="e.g. [env.SPARK3_DSPARK_COST_DIR]",
        )  # fmt: skip
    return [str(p).strip() for p in paths]


def _remove(data: dict[Any, Any], keys: tuple[str, ...]) -> bool:
    """Delete data[k1][k2]...; False when any key along the way is missing."""
    for key in keys[:-1]:
        inner = data.get(key)
        if not isinstance(inner, dict):
            return False
        data[key] = inner = dict(inner)  # never mutate the (cached) base file's own mappings
        data = inner
    if keys[-1] not in data:
        return False
    del data[keys[-1]]
    return True


def _with_kind(
    value: dict[Any, Any],
    base: tuple[object, Path],
    data: dict[Any, Any],
    origins: dict[Loc, Origin],
    lines: dict[Loc, int],
) -> tuple[dict[Any, Any], dict[Loc, Origin]]:
    """A top-level overlay keeps its base's kind; a different kind of its own is an error."""
    path = origins[()].file
    base_kind, base_path = base
    if "kind" not in value:
        return ({"kind": base_kind, **data} if base_kind is not None else data), origins
    if base_kind is not None and value["kind"] != base_kind:
        raise _error(
            f"kind {value['kind']!r} differs from the kind of {base_path}",
            path,
            lines,
            ("kind",),
            expected=repr(base_kind),
        )
    origins[("kind",)] = Origin(path, _line(lines, ("kind",)))
    return {"kind": value["kind"], **data}, origins


def merge(
    base: dict[Any, Any],
    base_origins: dict[Loc, Origin],
    over: dict[Any, Any],
    over_origins: dict[Loc, Origin],
) -> tuple[dict[Any, Any], dict[Loc, Origin]]:
    """Deep-merge `over` into `base`: mappings merge per key, anything else replaces."""
    data = dict(base)
    origins = dict(base_origins)
    for key, value in over.items():
        sub_over = _subtree(over_origins, key)
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            sub_base = _subtree(origins, key)
            data[key], merged = merge(data[key], sub_base, value, sub_over)
        else:
            data[key], merged = value, sub_over
        origins = {loc: o for loc, o in origins.items() if loc[:1] != (key,)}
        origins.update({(key, *loc): origin for loc, origin in merged.items()})
    return data, origins


def _subtree(origins: dict[Loc, Origin], key: Any) -> dict[Loc, Origin]:
    return {loc[1:]: o for loc, o in origins.items() if loc[:1] == (key,)}


def _line(lines: dict[Loc, int], loc: Loc) -> int:
    for end in range(len(loc), -1, -1):
        line = lines.get(loc[:end])
        if line is not None:
            return line
    return 1


def _error(
    message: str, path: Path, lines: dict[Loc, int], loc: Loc, expected: str | None = None
) -> SpecError:
    return SpecError(
        message, file=path, line=_line(lines, loc), key=format_loc(loc), expected=expected
    )


def spec_paths(
    model: BaseModel, loc: Loc = (), *, confined_only: bool = False
) -> Iterator[tuple[Loc, Path]]:
    """Every SpecPath value inside `model` (and its `local_paths`), with its key path.

    With `confined_only`, HostPath values and `local_paths` (node workdirs: where ranks write,
    anywhere on the machine by design) are left out.
    """
    if isinstance(model, SpecModel) and not confined_only:
        for sub in model.local_paths():
            value = _get(model, sub)
            if isinstance(value, str):
                yield (*loc, *sub), Path(value)
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        here = (*loc, name)
        marker = _path_marker(field.annotation, field.metadata)
        if isinstance(value, Path) and marker is not None:
            if marker.confined or not confined_only:
                yield here, value
        elif isinstance(value, list | tuple) and marker is not None:
            if marker.confined or not confined_only:
                yield from (
                    ((*here, index), item)
                    for index, item in enumerate(value)
                    if isinstance(item, Path)
                )
        else:
            yield from _paths_in(value, here, confined_only)


def _paths_in(value: Any, loc: Loc, confined_only: bool) -> Iterator[tuple[Loc, Path]]:
    if isinstance(value, BaseModel):
        yield from spec_paths(value, loc, confined_only=confined_only)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _paths_in(item, (*loc, index), confined_only)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _paths_in(item, (*loc, key), confined_only)


def _path_marker(annotation: Any, metadata: list[Any]) -> SpecPathMarker | None:
    for item in metadata:
        if isinstance(item, SpecPathMarker):
            return item
    if typing.get_origin(annotation) is typing.Annotated:
        return _path_marker(None, list(annotation.__metadata__))
    if typing.get_origin(annotation) in (list, tuple):
        return _path_marker(typing.get_args(annotation)[0], [])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _path_marker(arg, [])
            if found is not None:
                return found
    return None


def _get(model: BaseModel, loc: Loc) -> Any:
    value: Any = model
    for part in loc:
        value = value[part] if isinstance(part, int) else getattr(value, part)
    return value


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _deep_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_deep_copy(item) for item in value]
    return value


def _assign(data: Any, loc: Loc, value: Any) -> None:
    for part in loc[:-1]:
        data = data.setdefault(part, {}) if isinstance(data, dict) else data[part]
    data[loc[-1]] = value
