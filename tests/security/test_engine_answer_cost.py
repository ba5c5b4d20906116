"""Attacks on the cost of a structured answer and on the engine's validation of hostile values.

A ~1 KB chat request whose `response_format` schema (or a tool's `parameters`) nested arrays of
minItems = maxItems = 32 built a 32^depth answer on the event loop (five levels: /health blocked
43 s, 203 MB; six: out of memory), and a 100 KB `const` three arrays deep killed the engine in
7 s. Now the largest answer a schema allows is computed from the schema at parse time and a
request over its budget is a 400 (`answer_too_large`) before anything runs; the answer is built
off the event loop. Hostile schema values (`required: [{}]`, null counts, NaN bounds) and a
non-UTF-8 Authorization header answered 500; now 400 and 401.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sparkengine.launch import LocalCluster

from .engine_server import assert_serving, request, running_engine

pytestmark = pytest.mark.integration
KEY = "k-answer-cost"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_engine(tmp_path_factory.mktemp("cost"), args=["--api-key", KEY]) as cluster:
        cluster.wait_ready()
        yield cluster


def nested(depth: int, leaf: dict[str, Any], items: int | None = 32) -> dict[str, Any]:
    """`depth` arrays around `leaf`, each of exactly `items` items (None: no count given)."""
    schema = leaf
    for _ in range(depth):
        counts = {} if items is None else {"minItems": items, "maxItems": items}
        schema = {"type": "array", **counts, "items": schema}
    return schema


def chat(**fields: Any) -> dict[str, Any]:
    message = {"role": "user", "content": "hi"}
    return {"model": "sparkengine", "messages": [message], "max_tokens": 8, **fields}


def json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}


def tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "f", "parameters": parameters}}


def post(engine: LocalCluster, body: Any, *, raw: bytes | None = None) -> tuple[int, Any]:
    return request(engine, "POST", "/v1/chat/completions", body, raw=raw, headers=AUTH)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (chat(response_format=json_schema(nested(5, {"type": "integer"}))), "response_format"),
        (chat(response_format=json_schema(nested(6, {"type": "integer"}))), "response_format"),
        (chat(response_format=json_schema(nested(3, {"const": "x" * 100_000}))), "response_format"),
        (
            chat(tools=[tool({"type": "object", "properties": {"a": nested(5, {})}})]),
            "tools",
        ),
        (
            chat(response_format=json_schema(nested(8, {"enum": ["y" * 50]}, items=None))),
            "response_format",
        ),  # no counts still yield up to 3 items a level: 3^8 x 50 bytes
    ],
    ids=["arrays-5-deep", "arrays-6-deep", "const-100k-3-deep", "tool-arrays", "enum-3^8"],
)
def test_a_schema_whose_answer_outgrows_the_request_is_a_400_before_anything_runs(
    engine: LocalCluster, body: dict[str, Any], param: str
) -> None:
    started = time.perf_counter()
    status, answer = post(engine, body)
    assert status == 400, answer
    assert answer["error"]["code"] == "answer_too_large"
    assert answer["error"]["param"] == param
    assert "its largest answer is" in answer["error"]["message"]
    assert time.perf_counter() - started < 5.0, "the answer was built before it was refused"
    assert assert_serving(engine) < 2.0


def test_a_large_answer_within_the_budget_is_served_and_conforms(engine: LocalCluster) -> None:
    status, answer = post(engine, chat(response_format=json_schema(nested(2, {"type": "integer"}))))
    assert status == 200, answer
    content = json.loads(answer["choices"][0]["message"]["content"])
    assert [len(row) for row in content] == [32] * 32
    assert all(isinstance(value, int) for row in content for value in row)


@pytest.mark.parametrize(
    "raw",
    [
        json.dumps(chat(response_format=json_schema({"properties": {"a": {}}, "required": [{}]}))),
        json.dumps(chat(response_format=json_schema({"type": "string", "minLength": None}))),
        json.dumps(chat(response_format=json_schema({"type": "array", "maxItems": None}))),
        json.dumps(chat(response_format=json_schema({"type": "integer", "minimum": float("nan")}))),
        json.dumps(chat(tools=[tool({"type": "object", "required": [["a"]]})])),
    ],
    ids=["required-object", "null-minLength", "null-maxItems", "NaN-minimum", "tool-required"],
)
def test_hostile_schema_values_are_a_400_not_a_500(engine: LocalCluster, raw: str) -> None:
    status, answer = post(engine, None, raw=raw.encode())
    assert status == 400, answer
    assert answer["error"]["type"] == "invalid_request_error"
    assert_serving(engine)


@pytest.mark.parametrize("value", [b"Bearer \xe9t\xe9", "Bearer été".encode(), b"\xff\xfe"])
def test_a_non_ascii_authorization_header_is_a_401_not_a_500(
    engine: LocalCluster, value: bytes
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=30)
    try:
        conn.putrequest("GET", "/v1/models")
        conn.putheader("Authorization", value)
        conn.endheaders()
        response = conn.getresponse()
        answer = json.loads(response.read())
    finally:
        conn.close()
    assert response.status == 401, answer
    assert answer["error"]["code"] == "invalid_api_key"
