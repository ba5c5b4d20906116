"""Tool calls and JSON-schema responses for chat: validated at parse time, built from the tokens.

The engine has no grammar in its sampler. It generates its tokens as for any request (greedy at
temperature 0) and then *reads* them as the choices of a small constrained generator: walking
the schema (a tool's `parameters`, or `response_format.json_schema.schema`), every decision
takes the next generated token (cycling when they run out): which tool (`tool_choice` "auto" or
"required"), which enum member, an integer in [minimum, maximum], a boolean, an array's length,
each character of a string. A choice is a hash of the token's id and the exact bits of its
logprob, so the answer always conforms to the schema and is a function of the model's logits
down to the last bit: an engine whose sums vary with the batch (the batch-variant fault) changes
the tool call or the JSON even where no token flips. (A sampler-level grammar such as vLLM's
changes its answer only when a token flips; the determinism gate compares tokens and logprobs
as well, so it catches both.) The logprobs and token ids returned are those of the tokens.

The wire format is OpenAI's (as vLLM serves it): `tools` of type function, `tool_choice`
"none" | "auto" | "required" | {"type": "function", "function": {"name"}}; a call answers
`message.tool_calls[i].function.{name, arguments}` (arguments a JSON string), content null and
finish_reason "tool_calls". `response_format` is {"type": "text" | "json_object"} or
{"type": "json_schema", "json_schema": {"name", "schema"}}. "auto" here always calls a tool.

Supported schema keywords: type (one or a list), properties, required, items, enum, const,
anyOf, minimum, maximum, minLength, maxLength, minItems, maxItems, plus annotations. Any other
keyword is refused with a 400 naming where it is, so a response never claims a constraint it
did not keep.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sparkengine import tokenizer
from sparkengine.errors import RequestError

ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$schema", "$id", "additionalProperties"}
)
KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "items",
        "enum",
        "const",
        "anyOf",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
    }
)
TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
MAX_DEPTH = 8
MAX_ITEMS = 32  # minItems above this is refused; arrays get at most min + 3 items
MAX_STRING = 256
SPAN = 12  # strings get at most minLength + SPAN characters; ranges without a max span 1000
MAX_TOOLS = 64
WIDE_STEP = 100
WIDE = WIDE_STEP * WIDE_STEP  # numbers and integers take two choices: WIDE values
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
JSON_OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
"""What `response_format: {"type": "json_object"}` fills: one string member from the tokens."""


@dataclass(frozen=True)
class Tool:
    """One function the model may call."""

    name: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class Structure:
    """What a chat request asks the answer to be besides text."""

    tools: tuple[Tool, ...] = ()
    tool_choice: str = "none"  # "none", "auto", "required", or a tool's name
    schema: dict[str, Any] | None = None  # the JSON answer's schema (None: plain text)

    @property
    def calls_tool(self) -> bool:
        """Whether the answer is a tool call."""
        return bool(self.tools) and self.tool_choice != "none"


@dataclass(frozen=True)
class Rendered:
    """The answer built from the tokens: content, or tool calls (name, arguments JSON)."""

    content: str | None
    tool_calls: tuple[tuple[str, str], ...] = ()

    def message(self) -> dict[str, Any]:
        """The chat message fields (tool call ids are fresh, as vLLM's are)."""
        calls = [
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            for name, arguments in self.tool_calls
        ]
        return {"content": self.content, "tool_calls": calls}


# -- validation (parse time: a bad schema is a 400 before anything runs) -------------------------


def _fail(path: str, message: str) -> RequestError:
    return RequestError(f"{path}: {message}", re.split(r"[.\[]", path, maxsplit=1)[0])


def _count(schema: dict[str, Any], key: str, path: str, high: int) -> int | None:
    if key not in schema:  # an explicit null is a bad value, not an absent one
        return None
    value = schema[key]
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
        raise _fail(f"{path}.{key}", f"must be an integer between 0 and {high}")
    return value


def check_schema(schema: Any, path: str, depth: int = 0) -> None:
    """Refuse what the generator cannot honour, naming the place (RequestError)."""
    if not isinstance(schema, dict):
        raise _fail(path, "a schema must be a JSON object")
    if depth > MAX_DEPTH:
        raise _fail(path, f"schemas nest at most {MAX_DEPTH} deep")
    for key in schema:
        if key not in KEYWORDS and key not in ANNOTATIONS:
            raise _fail(f"{path}.{key}", "this schema keyword is not supported")
    _choices(schema, path, depth)
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise _fail(f"{path}.properties", "must be an object of schemas")
    for name, sub in properties.items():
        check_schema(sub, f"{path}.properties.{name}", depth + 1)
    required = schema.get("required", [])
    if not isinstance(required, list) or any(
        not isinstance(r, str) or r not in properties for r in required
    ):
        raise _fail(f"{path}.required", "must list names of declared properties")
    if "items" in schema:
        check_schema(schema["items"], f"{path}.items", depth + 1)
    _bounds(schema, path)


def _choices(schema: dict[str, Any], path: str, depth: int) -> None:
    """enum, anyOf and type: non-empty, and only what the generator builds."""
    if "enum" in schema and (not isinstance(schema["enum"], list) or not schema["enum"]):
        raise _fail(f"{path}.enum", "must be a non-empty list")
    if "anyOf" in schema:
        branches = schema["anyOf"]
        if not isinstance(branches, list) or not branches:
            raise _fail(f"{path}.anyOf", "must be a non-empty list of schemas")
        for i, branch in enumerate(branches):
            check_schema(branch, f"{path}.anyOf[{i}]", depth + 1)
    kinds = schema.get("type", [])
    for kind in kinds if isinstance(kinds, list) else [kinds]:
        if kind not in TYPES:
            raise _fail(f"{path}.type", f"must be one of {', '.join(TYPES)} (or a list of them)")


def _bounds(schema: dict[str, Any], path: str) -> None:
    for key in ("minimum", "maximum"):
        value = schema.get(key)
        if value is not None and (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not abs(value) <= 1e15  # NaN too (Python's JSON reads NaN and Infinity)
        ):
            raise _fail(f"{path}.{key}", "must be a number of magnitude at most 1e15")
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None and low > high:
        raise _fail(f"{path}.minimum", "is above maximum")
    kinds = schema.get("type")
    integral = "integer" in kinds if isinstance(kinds, list) else kinds == "integer"
    if integral and low is not None and high is not None and -(-low // 1) > high // 1:
        raise _fail(f"{path}.minimum", "the range holds no integer")
    for low_key, high_key, cap in (
        ("minLength", "maxLength", MAX_STRING),
        ("minItems", "maxItems", MAX_ITEMS),
    ):
        first = _count(schema, low_key, path, cap)
        last = _count(schema, high_key, path, 1 << 30)
        if first is not None and last is not None and first > last:
            raise _fail(f"{path}.{low_key}", f"is above {high_key}")


def _tools(body: dict[str, Any]) -> tuple[Tool, ...]:
    raw = body.get("tools")
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_TOOLS:
        raise RequestError(f"'tools' must be a list of at most {MAX_TOOLS} tools", "tools")
    tools = []
    for i, item in enumerate(raw):
        function = item.get("function") if isinstance(item, dict) else None
        if (
            not isinstance(item, dict)
            or item.get("type") != "function"
            or not isinstance(function, dict)
        ):
            raise _fail(f"tools[{i}]", 'must be {"type": "function", "function": {...}}')
        name = function.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise _fail(f"tools[{i}].function.name", "must match [A-Za-z0-9_-]{1,64}")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        check_schema(parameters, f"tools[{i}].function.parameters")
        if parameters.get("type", "object") != "object":
            raise _fail(f"tools[{i}].function.parameters.type", "must be object")
        tools.append(Tool(name, parameters))
    if len({t.name for t in tools}) != len(tools):
        raise RequestError("'tools' names a function twice", "tools")
    return tuple(tools)


def _tool_choice(body: dict[str, Any], tools: Sequence[Tool]) -> str:
    choice = body.get("tool_choice")
    if choice is None:
        return "auto" if tools else "none"
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if choice.get("type") != "function" or not isinstance(name, str):
            raise RequestError(
                '\'tool_choice\' must be "none", "auto", "required" or '
                '{"type": "function", "function": {"name": ...}}',
                "tool_choice",
            )
        if name not in {t.name for t in tools}:
            raise RequestError(
                f"'tool_choice' names {name!r}, which is not in 'tools'", "tool_choice"
            )
        return name
    if choice not in ("none", "auto", "required"):
        raise RequestError(
            '\'tool_choice\' must be "none", "auto", "required" or a function', "tool_choice"
        )
    if choice == "required" and not tools:
        raise RequestError("'tool_choice' is \"required\" but no 'tools' are given", "tool_choice")
    return str(choice)


def _response_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = body.get("response_format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return JSON_OBJECT
    if kind != "json_schema":
        raise RequestError(
            "'response_format.type' must be text, json_object or json_schema", "response_format"
        )
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or "schema" not in spec:
        raise RequestError(
            "'response_format.json_schema' must be an object with a 'schema'", "response_format"
        )
    check_schema(spec["schema"], "response_format.json_schema.schema")
    return dict(spec["schema"])


def parse_structure(body: dict[str, Any]) -> Structure | None:
    """`tools`, `tool_choice` and `response_format` of a chat body (None: plain text)."""
    tools = _tools(body)
    choice = _tool_choice(body, tools)
    schema = _response_schema(body)
    if not tools and schema is None:
        return None
    return Structure(tools=tools, tool_choice=choice, schema=schema)


# -- generation (after the tokens: a walk of the schema that reads them) --------------------------


def choice_value(token: int, logprob: float | None) -> int:
    """One choice read from a generated token: its id, or a hash of its id and logprob bits."""
    if logprob is None:
        return token
    digest = hashlib.blake2b(struct.pack("<Id", token, logprob), digest_size=4).digest()
    return int.from_bytes(digest, "little")


class _Tokens:
    """The generated tokens as a cycle of choices."""

    def __init__(self, tokens: Sequence[int], logprobs: Sequence[float] | None) -> None:
        if logprobs is None:
            values = list(tokens)
        else:
            values = [choice_value(t, lp) for t, lp in zip(tokens, logprobs, strict=True)]
        self.values = values or [tokenizer.EOS]
        self.at = 0

    def next(self) -> int:
        value = self.values[self.at % len(self.values)]
        self.at += 1
        return value

    def pick(self, count: int) -> int:
        """An index in [0, count)."""
        return self.next() % count

    def wide(self) -> int:
        """A number in [0, WIDE) from two choices."""
        return self.pick(WIDE_STEP) * WIDE_STEP + self.pick(WIDE_STEP)

    def char(self) -> str:
        """A printable ASCII character."""
        return chr(32 + self.pick(95))


def _value(schema: dict[str, Any], tokens: _Tokens) -> Any:
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][tokens.pick(len(schema["enum"]))]
    if "anyOf" in schema:
        return _value(schema["anyOf"][tokens.pick(len(schema["anyOf"]))], tokens)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[tokens.pick(len(kind))] if kind else None
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    return _BUILDERS[kind](schema, tokens)


def _object(schema: dict[str, Any], tokens: _Tokens) -> dict[str, Any]:
    return {name: _value(sub, tokens) for name, sub in schema.get("properties", {}).items()}


def _array(schema: dict[str, Any], tokens: _Tokens) -> list[Any]:
    low = schema.get("minItems", 0)
    high = min(schema.get("maxItems", low + 3), low + 3)
    count = low + tokens.pick(high - low + 1)
    return [_value(schema.get("items", {}), tokens) for _ in range(count)]


def _string(schema: dict[str, Any], tokens: _Tokens) -> str:
    low = schema.get("minLength", 0)
    high = min(schema.get("maxLength", low + SPAN), low + SPAN)
    return "".join(tokens.char() for _ in range(low + tokens.pick(high - low + 1)))


def _range(schema: dict[str, Any]) -> tuple[float, float]:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is None:
        low = 0 if high is None or high >= 0 else high - 1000
    if high is None:
        high = low + 1000
    return low, high


def _integer(schema: dict[str, Any], tokens: _Tokens) -> int:
    low, high = _range(schema)
    first, last = int(-(-low // 1)), int(high // 1)  # ceil(low), floor(high)
    if first > last:
        raise RequestError("an integer schema's range holds no integer", "response_format")
    return first + tokens.wide() % (last - first + 1)


def _number(schema: dict[str, Any], tokens: _Tokens) -> float:
    low, high = _range(schema)
    share = tokens.wide() / (WIDE - 1)
    return min(max(round(low + share * (high - low), 4), low), high)


_BUILDERS: dict[str, Any] = {
    "object": _object,
    "array": _array,
    "string": _string,
    "integer": _integer,
    "number": _number,
    "boolean": lambda _schema, tokens: tokens.pick(2) == 1,
    "null": lambda _schema, _tokens: None,
}


def render(
    structure: Structure,
    generated: Sequence[int],
    text: str,
    logprobs: Sequence[float] | None = None,
) -> Rendered:
    """The answer the tokens choose: a tool call, JSON content, or the text as it is.

    With `logprobs` (the engine passes them) each choice also reads the exact bits of its
    token's logprob; without, the token ids alone.
    """
    tokens = _Tokens(generated, logprobs)
    if structure.calls_tool:
        names = [t.name for t in structure.tools]
        if structure.tool_choice in names:
            tool = structure.tools[names.index(structure.tool_choice)]
        else:
            tool = structure.tools[tokens.pick(len(structure.tools))]
        arguments = _value(tool.parameters, tokens)
        return Rendered(content=None, tool_calls=((tool.name, json.dumps(arguments)),))
    if structure.schema is not None:
        return Rendered(content=json.dumps(_value(structure.schema, tokens)))
    return Rendered(content=text)
