"""How large a structured answer can be, known from its schema before anything is built.

A schema is small but its answer need not be: nested arrays of `minItems` 32 multiply (five
levels of 32 are 33 million values from a 1 KB request), and a `const` is repeated once per
item that holds it (100 KB three arrays deep is 3 GB). The generator in `structured` builds its
answer whole, so the only safe moment to refuse is parse time: the size of the largest answer a
schema allows is computed here from the schema alone, in time linear in the schema, and a
request whose schemas allow more than its budget is a 400 naming the place, before any token
is generated. The budget grows with what the request itself carries (the size of its schemas)
and with how many tokens it asks for, so no answer costs more than a fixed multiple of its
request.

The size is an upper bound on the JSON text `structured.render` writes (json.dumps's default
separators, every string character escaped at worst to two bytes); every value it builds is at
least one byte, so bounding the bytes bounds the work too.
"""

from __future__ import annotations

import json
from typing import Any

from sparkengine.errors import RequestError
from sparkengine.structured import SPAN, Structure

BASE_BUDGET = 64 << 10
"""Bytes any structured answer may have, whatever its request (a few hundred typical values)."""
SCHEMA_FACTOR = 2
"""Bytes of answer allowed per byte of schema in the request (a `const` answered once)."""
PER_TOKEN = 64
"""Bytes of answer allowed per requested token (`max_tokens`)."""
NUMBER_BYTES = 32  # the longest integer or number the generator writes (|x| <= 1e15, 4 decimals)
EXTRA_ITEMS = 3  # the generator writes at most minItems + 3 items (structured._array)


def budget(schema_bytes: int, max_tokens: int) -> int:
    """The largest structured answer a request with these schemas and max_tokens may get."""
    return BASE_BUDGET + SCHEMA_FACTOR * schema_bytes + PER_TOKEN * max(max_tokens, 0)


def largest(schema: dict[str, Any]) -> int:
    """Bytes of the largest JSON text the generator can write for a (checked) schema."""
    if "const" in schema:
        return _dumped(schema["const"])
    if "enum" in schema:
        return max(_dumped(member) for member in schema["enum"])
    if "anyOf" in schema:
        return max(largest(branch) for branch in schema["anyOf"])
    kinds = schema.get("type")
    if isinstance(kinds, list):
        return max((_of_kind(kind, schema) for kind in kinds), default=_of_kind(None, schema))
    return _of_kind(kinds, schema)


def check(structure: Structure | None, max_tokens: int) -> None:
    """Refuse (RequestError, a 400) a structure whose largest answer exceeds its budget."""
    if structure is None:
        return
    places: list[tuple[str, str, dict[str, Any]]] = []
    if structure.calls_tool:
        for i, tool in enumerate(structure.tools):
            places.append((f"tools[{i}].function.parameters", "tools", tool.parameters))
    if structure.schema is not None:
        places.append(("response_format.json_schema.schema", "response_format", structure.schema))
    allowed = budget(sum(_dumped(schema) for _, _, schema in places), max_tokens)
    for path, param, schema in places:
        size = largest(schema)
        if size > allowed:
            raise RequestError(
                f"{path}: its largest answer is {size} bytes, over this request's budget of "
                f"{allowed} ({BASE_BUDGET} + {SCHEMA_FACTOR} per byte of schema + {PER_TOKEN} "
                "per max_tokens): lower minItems/maxItems or the size of const/enum values",
                param,
                "answer_too_large",
            )


def _of_kind(kind: Any, schema: dict[str, Any]) -> int:
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if kind == "object":
        members = schema.get("properties", {})
        return 2 + sum(_dumped(name) + 4 + largest(sub) for name, sub in members.items())
    if kind == "array":
        low: int = schema.get("minItems", 0)
        count: int = min(schema.get("maxItems", low + EXTRA_ITEMS), low + EXTRA_ITEMS)
        return 2 + count * (largest(schema.get("items", {})) + 2) if count else 2
    if kind == "string":
        shortest: int = schema.get("minLength", 0)
        longest: int = min(schema.get("maxLength", shortest + SPAN), shortest + SPAN)
        return 2 + 2 * longest
    if kind in ("integer", "number"):
        return NUMBER_BYTES
    return 5  # boolean ("false") or null


def _dumped(value: Any) -> int:
    try:
        return len(json.dumps(value))
    except (RecursionError, ValueError, TypeError):
        raise RequestError("a schema value nests too deeply to answer", "response_format") from None
