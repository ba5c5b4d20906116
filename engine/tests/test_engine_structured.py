"""Tool calls and JSON-schema responses: the wire format (OpenAI's, read with the official
client), conformance to the schema, determinism at temperature 0, dependence on the tokens,
and 400s naming the bad field.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from sparkengine.errors import RequestError
from sparkengine.structured import check_schema, parse_structure, render

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1, "maxLength": 12},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit"],
        },
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "score": {"type": "number", "minimum": -1, "maximum": 1},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "ok": {"type": "boolean"},
        "note": {"anyOf": [{"type": "null"}, {"type": "integer", "maximum": -5}]},
    },
    "required": ["name", "score", "tags", "ok", "note"],
}


def _conforms(value: Any, schema: dict[str, Any]) -> None:
    """The subset of JSON Schema the engine supports, checked independently."""
    if "anyOf" in schema:
        errors = []
        for branch in schema["anyOf"]:
            try:
                _conforms(value, branch)
                return
            except AssertionError as error:
                errors.append(error)
        raise AssertionError(errors)
    if "enum" in schema:
        assert value in schema["enum"]
    kind = {
        "object": dict,
        "array": list,
        "string": str,
        "integer": int,
        "number": int | float,
        "boolean": bool,
        "null": type(None),
    }[schema["type"]]
    assert isinstance(value, kind), (value, schema)
    if schema["type"] == "object":
        assert set(schema.get("required", [])) <= set(value)
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                _conforms(value[name], sub)
    if schema["type"] == "array":
        assert schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", 10**9)
        for item in value:
            _conforms(item, schema["items"])
    if schema["type"] == "string":
        assert schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", 10**9)
    if schema["type"] in ("integer", "number"):
        assert schema.get("minimum", -(10**18)) <= value <= schema.get("maximum", 10**18)


# -- pure: parsing and building -------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_built_json_conforms_for_any_tokens(seed: int) -> None:
    tokens = [(seed * 37 + i * 11) % 100 for i in range(seed % 7)]
    structure = parse_structure(
        {"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}}}
    )
    assert structure is not None
    rendered = render(structure, tokens, "")
    assert rendered.content is not None
    _conforms(json.loads(rendered.content), SCHEMA)


def test_the_tokens_choose_the_tool_and_its_arguments() -> None:
    structure = parse_structure({"tools": [WEATHER, CLOCK], "tool_choice": "required"})
    assert structure is not None
    calls = {render(structure, [t, 50, 60, 70], "").tool_calls for t in (40, 41)}
    assert {call[0][0] for call in calls} == {"get_weather", "get_time"}
    weather = next(c for c in calls if c[0][0] == "get_weather")[0]
    _conforms(json.loads(weather[1]), WEATHER["function"]["parameters"])  # type: ignore[index]
    one = render(structure, [40, 50, 60, 70], "")
    assert one == render(structure, [40, 50, 60, 70], "")
    assert one != render(structure, [40, 50, 60, 71], "")


def test_a_last_bit_change_of_a_logprob_changes_the_answer() -> None:
    structure = parse_structure({"tools": [WEATHER], "tool_choice": "required"})
    assert structure is not None
    tokens, logprobs = [40, 50, 60, 70], [-0.5, -0.25, -0.125, -1.0]
    nudged = [-0.5, -0.25, math.nextafter(-0.125, 0.0), -1.0]
    one = render(structure, tokens, "", logprobs)
    assert one == render(structure, tokens, "", list(logprobs))
    assert one.tool_calls[0][1] != render(structure, tokens, "", nudged).tool_calls[0][1]
    _conforms(json.loads(one.tool_calls[0][1]), WEATHER["function"]["parameters"])  # type: ignore[index]


def test_a_named_tool_choice_is_always_called_and_none_answers_text() -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    structure = parse_structure({"tools": [WEATHER, CLOCK], "tool_choice": named})
    assert structure is not None
    assert all(render(structure, [t], "").tool_calls[0][0] == "get_time" for t in range(10))
    off = parse_structure({"tools": [WEATHER], "tool_choice": "none"})
    assert off is not None
    assert render(off, [5, 6], "hi").content == "hi"
    assert parse_structure({"response_format": {"type": "text"}}) is None


@pytest.mark.parametrize(
    ("body", "param", "where"),
    [
        ({"tools": {"a": 1}}, "tools", "'tools'"),
        ({"tools": [{"type": "function"}]}, "tools", "tools[0]"),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools", "name"),
        ({"tools": [WEATHER, WEATHER]}, "tools", "twice"),
        ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice", "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice", "no 'tools'"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "tool_choice",
            "'x'",
        ),
        ({"response_format": {"type": "xml"}}, "response_format", "type"),
        ({"response_format": {"type": "json_schema"}}, "response_format", "schema"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"schema": {"properties": {"a": {"$ref": "x"}}}},
                }
            },
            "response_format",
            "response_format.json_schema.schema.properties.a.$ref",
        ),
    ],
)
def test_bad_structure_is_a_request_error_naming_the_field(
    body: dict[str, Any], param: str, where: str
) -> None:
    with pytest.raises(RequestError) as caught:
        parse_structure(body)
    assert caught.value.param == param
    assert where in str(caught.value)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "strings"},
        {"enum": []},
        {"type": "integer", "minimum": 0.2, "maximum": 0.8},
        {"type": "string", "minLength": 5, "maxLength": 2},
        {"type": "array", "minItems": 1000},
        {"type": "object", "properties": {"a": {}}, "required": ["b"]},
        {"type": "number", "maximum": 1e300},
    ],
)
def test_schemas_the_generator_cannot_honour_are_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(RequestError):
        check_schema(schema, "s")


# -- over HTTP: the real engine --------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(shared_cluster: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=shared_cluster.url + "/v1", api_key="unused", max_retries=0)


MESSAGES: Any = [{"role": "user", "content": "What is the weather in Oslo?"}]


@pytest.mark.integration
def test_a_tool_call_over_http_is_openai_shaped_and_deterministic(client: openai.OpenAI) -> None:
    def ask() -> Any:
        return client.chat.completions.create(
            model="sparkengine",
            messages=MESSAGES,
            tools=[WEATHER, CLOCK],  # type: ignore[list-item]
            tool_choice="auto",
            max_tokens=12,
            temperature=0,
            logprobs=True,
        )

    first, second = ask(), ask()
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls or []
    assert len(calls) == 1
    assert calls[0].type == "function"
    assert calls[0].function.name in ("get_weather", "get_time")
    arguments = json.loads(calls[0].function.arguments)
    if calls[0].function.name == "get_weather":
        _conforms(arguments, WEATHER["function"]["parameters"])  # type: ignore[index]
    assert choice.logprobs is not None
    assert len(choice.logprobs.content or []) == 12
    again = second.choices[0].message.tool_calls or []
    assert [(c.function.name, c.function.arguments) for c in again] == [
        (c.function.name, c.function.arguments) for c in calls
    ]


@pytest.mark.integration
def test_a_json_schema_response_over_http_conforms_and_streams_the_same(
    client: openai.OpenAI,
) -> None:
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}}
    whole = client.chat.completions.create(
        model="sparkengine",
        messages=MESSAGES,
        response_format=fmt,
        max_tokens=10,
        temperature=0,
    )
    content = whole.choices[0].message.content
    assert content is not None
    _conforms(json.loads(content), SCHEMA)
    assert whole.choices[0].finish_reason == "length"
    stream = client.chat.completions.create(
        model="sparkengine",
        messages=MESSAGES,
        response_format=fmt,
        max_tokens=10,
        temperature=0,
        stream=True,
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == content


@pytest.mark.integration
def test_a_streamed_tool_call_carries_name_and_arguments(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="sparkengine",
        messages=MESSAGES,
        tools=[WEATHER],  # type: ignore[list-item]
        max_tokens=6,
        temperature=0,
        stream=True,
    )
    calls, finish = [], None
    for chunk in stream:
        for choice in chunk.choices:
            calls += choice.delta.tool_calls or []
            finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert [c.function.name for c in calls if c.function] == ["get_weather"]
    assert json.loads(calls[0].function.arguments or "")["unit"] in ("celsius", "fahrenheit")  # type: ignore[union-attr]


@pytest.mark.integration
def test_a_bad_schema_is_a_400_naming_it(shared_cluster: Any) -> None:
    body = {
        "model": "sparkengine",
        "messages": MESSAGES,
        "response_format": {"type": "json_schema", "json_schema": {"schema": {"oneOf": []}}},
    }
    request = urllib.request.Request(
        shared_cluster.url + "/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    with caught.value as response:
        error = json.load(response)["error"]
    assert response.code == 400
    assert error["param"] == "response_format"
    assert "schema.oneOf" in error["message"]


def _tool_call(url: str, content: str, max_tokens: int = 24) -> tuple[Any, list[float]]:
    body = {
        "model": "sparkengine",
        "messages": [{"role": "user", "content": content}],
        "tools": [WEATHER, CLOCK],
        "max_tokens": max_tokens,
        "temperature": 0,
        "logprobs": True,
    }
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        choice = json.load(response)["choices"][0]
    call = choice["message"]["tool_calls"][0]["function"]
    return (call["name"], call["arguments"]), [c["logprob"] for c in choice["logprobs"]["content"]]


@pytest.mark.integration
@pytest.mark.slow
def test_the_batch_variant_fault_changes_concurrent_tool_calls(start_cluster: Any) -> None:
    cluster = start_cluster(env={"SPARKENGINE_FAULT_BATCH_VARIANT": "1"})
    cluster.wait_ready()
    asks = [f"Weather in city number {i}, please." for i in range(6)]
    alone = [_tool_call(cluster.url, ask) for ask in asks]
    with ThreadPoolExecutor(len(asks)) as pool:
        together = list(pool.map(lambda ask: _tool_call(cluster.url, ask), asks))
    assert together != alone
    changed = [a[0] != b[0] for a, b in zip(alone, together, strict=True)]
    assert any(changed), "the fault changes the tool calls themselves, not only the logprobs"
