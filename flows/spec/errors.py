"""Turn pydantic's validation errors into located, plain-language `SpecError`s.

Pydantic reports a location inside the model (with union tags and `[key]` markers) and a
message written for programmers. Users need the key path as they wrote it, the line it is on,
what is wrong and what was expected; this module does that translation and nothing else.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from flows.errors import SpecError
from flows.spec.base import Loc, ProblemsError
from flows.spec.yamlfile import format_loc


class _Origin(Protocol):
    @property
    def file(self) -> Path: ...
    @property
    def line(self) -> int: ...


TYPE_EXPECTED = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "string": "a string",
    "str": "a string",
    "list": "a list",
    "tuple": "a list",
    "dict": "a mapping",
    "model": "a mapping",
    "model_attributes": "a mapping",
    "path": "a path",
    "enum": "one of the listed values",
}

BOUNDS = {
    "greater_than": ("gt", "a value > {}"),
    "greater_than_equal": ("ge", "a value >= {}"),
    "less_than": ("lt", "a value < {}"),
    "less_than_equal": ("le", "a value <= {}"),
    "string_too_short": ("min_length", "at least {} character(s)"),
    "string_too_long": ("max_length", "at most {} character(s)"),
    "too_short": ("min_length", "at least {} item(s)"),
    "too_long": ("max_length", "at most {} item(s)"),
    "string_pattern_mismatch": ("pattern", "text matching {}"),
    "finite_number": ("", "a finite number"),
}


def spec_errors(
    error: ValidationError,
    data: dict[Any, Any],
    model: type[BaseModel],
    origin_of: Callable[[Loc], _Origin],
) -> list[SpecError]:
    """One SpecError per pydantic error (problems of cross-field rules expanded), in file order."""
    found: list[SpecError] = []
    for detail in error.errors(include_url=False):
        for loc, message, expected in _explain(detail, data, model):
            origin = origin_of(loc)
            found.append(
                SpecError(
                    message,
                    file=origin.file,
                    line=origin.line,
                    key=format_loc(loc),
                    expected=expected,
                )
            )
    found.sort(key=lambda e: (e.file or "", e.line or 0))
    return found


def _explain(
    detail: ErrorDetails, data: dict[Any, Any], model: type[BaseModel]
) -> list[tuple[Loc, str, str | None]]:
    loc = data_loc(detail["loc"], data)
    problem = (detail.get("ctx") or {}).get("error")
    if isinstance(problem, ProblemsError):
        return [((*loc, *p.loc), p.message, p.expected) for p in problem.problems]
    if detail["type"] == "extra_forbidden":
        allowed = allowed_keys(model, loc[:-1], data)
        return [(loc, "unknown key", "one of " + ", ".join(allowed) if allowed else None)]
    return [_describe(detail, loc)]


def _describe(detail: ErrorDetails, loc: Loc) -> tuple[Loc, str, str | None]:
    kind = detail["type"]
    ctx = detail.get("ctx") or {}
    discriminator = str(ctx.get("discriminator", "kind")).strip("'")
    if kind == "missing":
        result: tuple[Loc, str, str | None] = (loc, "required key is missing", None)
    elif kind == "union_tag_invalid":
        expected = f"one of {ctx.get('expected_tags')}"
        result = ((*loc, discriminator), f"unknown {discriminator} {ctx.get('tag')!r}", expected)
    elif kind == "union_tag_not_found":
        result = ((*loc, discriminator), "required key is missing", None)
    elif kind == "literal_error":
        result = (loc, f"{_short(detail['input'])} is not allowed", str(ctx.get("expected")))
    elif kind in BOUNDS:
        name, template = BOUNDS[kind]
        result = (loc, f"got {_short(detail['input'])}", template.format(ctx.get(name)))
    elif kind.endswith(("_type", "_parsing")) and _type_name(kind) in TYPE_EXPECTED:
        expected = TYPE_EXPECTED[_type_name(kind)]
        result = (loc, f"wrong type, got {_short(detail['input'])}", expected)
    else:
        result = (loc, _strip_prefix(detail["msg"]), None)
    return result


def _type_name(kind: str) -> str:
    return (
        "model_attributes"
        if kind.startswith("model_attributes")
        else kind.split("_", maxsplit=1)[0]
    )


def data_loc(loc: tuple[int | str, ...], data: Any) -> Loc:
    """Map pydantic's location onto the key path in the data (drops tags and `[key]`)."""
    path: list[str | int] = []
    current: Any = data
    for index, part in enumerate(loc):
        if part == "[key]":
            continue
        if _has(current, part):
            current = current[part]
        elif index == len(loc) - 1 or not isinstance(current, dict):
            current = None
        else:
            continue  # a union tag or validator name pydantic inserted
        path.append(part)
    return tuple(path)


def _has(container: Any, part: str | int) -> bool:
    if isinstance(container, dict):
        return part in container
    return isinstance(container, list) and isinstance(part, int) and 0 <= part < len(container)


def allowed_keys(model: type[BaseModel], loc: Loc, data: Any) -> list[str]:
    """The keys the model accepts at `loc` (best effort; empty when unknown)."""
    annotation: Any = model
    current: Any = data
    for part in loc:
        cls = _model_class(annotation, current)
        if cls is not None and isinstance(part, str) and part in cls.model_fields:
            annotation = cls.model_fields[part].annotation
        elif typing.get_origin(annotation) in (list, tuple) and isinstance(part, int):
            annotation = typing.get_args(annotation)[0]
        elif typing.get_origin(annotation) is dict:
            annotation = typing.get_args(annotation)[1]
        else:
            return []
        current = current.get(part) if isinstance(current, dict) else None
    cls = _model_class(annotation, current)
    return sorted(cls.model_fields) if cls is not None else []


def _model_class(annotation: Any, data: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) is typing.Annotated:
        return _model_class(typing.get_args(annotation)[0], data)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [
            m for m in (_model_class(a, data) for a in typing.get_args(annotation)) if m is not None
        ]
        kind = data.get("kind") if isinstance(data, dict) else None
        for member in members:
            field = member.model_fields.get("kind")
            if field is not None and kind in typing.get_args(field.annotation):
                return member
        return members[0] if len(members) == 1 else None
    return None


def _strip_prefix(message: str) -> str:
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
