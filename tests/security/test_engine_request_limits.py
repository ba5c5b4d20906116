"""Attacks on the event loop and on the API key: 400k stop strings held /health for seconds,
15 MiB prompts and /tokenize bodies seconds each, and /tokenize ignored --api-key. Now bodies
over --max-body-bytes are a 413, stop lists over --max-stop / --max-stop-chars and prompts
longer than the context are a 400 before any tokenizing, and every route but /health and
/metrics needs the key.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sparkengine.cli import build_parser
from sparkengine.launch import LocalCluster

from .engine_server import assert_serving, completion, request, running_engine

pytestmark = pytest.mark.integration
KEY = "k-attacks"
AUTH = {"Authorization": f"Bearer {KEY}"}
LIMITS = ["--max-body-bytes", "65536", "--max-stop", "4", "--max-stop-chars", "8"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    args = [*LIMITS, "--api-key", KEY]
    with running_engine(tmp_path_factory.mktemp("limits"), args=args) as cluster:
        cluster.wait_ready()
        yield cluster


def post(engine: LocalCluster, body: object, path: str = "/v1/completions") -> tuple[int, dict]:
    return request(engine, "POST", path, body, headers=AUTH)  # type: ignore[return-value]


def test_defaults_cap_bodies_and_stop_lists() -> None:
    args = build_parser().parse_args(
        ["serve", "--rank", "0", "--nnodes", "1", "--head", "h:1", "--port", "1", "--model", "m"]
    )
    assert (args.max_body_bytes, args.max_stop, args.max_stop_chars) == (2 << 20, 16, 256)


@pytest.mark.parametrize("path", ["/v1/completions", "/tokenize"])
def test_a_body_over_the_cap_is_a_413(engine: LocalCluster, path: str) -> None:
    status, body = post(engine, {"model": "sparkengine", "prompt": "a" * 100_000}, path)
    assert status == 413, body
    assert body["error"]["message"] == "request body exceeds 65536 bytes"
    assert assert_serving(engine) < 5.0


def test_too_many_stop_strings_are_a_400(engine: LocalCluster) -> None:
    status, body = post(engine, completion(stop=["zq"] * 5))
    assert status == 400, body
    assert body["error"]["param"] == "stop"
    assert "at most 4" in body["error"]["message"]
    assert_serving(engine)


def test_a_too_long_stop_string_is_a_400(engine: LocalCluster) -> None:
    status, body = post(engine, completion(stop=["x" * 9]))
    assert status == 400, body
    assert "at most 8" in body["error"]["message"]
    status, _ = post(engine, completion(stop=["x" * 8] * 4))
    assert status == 200


def test_a_prompt_longer_than_the_context_is_refused_before_tokenizing(
    engine: LocalCluster,
) -> None:
    status, body = post(engine, completion(prompt="a" * 60_000))
    assert status == 400, body
    assert "the context is" in body["error"]["message"]
    chat = {"model": "sparkengine", "messages": [{"role": "user", "content": "a" * 60_000}]}
    status, body = post(engine, chat, "/v1/chat/completions")
    assert status == 400, body
    assert_serving(engine)


def test_deeply_nested_json_is_a_400(engine: LocalCluster) -> None:
    status, body = request(
        engine, "POST", "/tokenize", raw=b"[" * 30_000 + b"]" * 30_000, headers=AUTH
    )
    assert status == 400, body
    assert body["error"]["message"] == "request body is not valid JSON"
    assert_serving(engine)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/tokenize", {"prompt": "hi"}),
        ("GET", "/v1/models", None),
        ("POST", "/v1/completions", completion()),
    ],
)
def test_every_route_but_health_and_metrics_needs_the_key(
    engine: LocalCluster, method: str, path: str, body: object
) -> None:
    status, answer = request(engine, method, path, body)
    assert status == 401, answer
    assert answer["error"]["code"] == "invalid_api_key"
    status, _ = request(engine, method, path, body, headers={"Authorization": "Bearer wrong"})
    assert status == 401
    status, _ = request(engine, method, path, body, headers=AUTH)
    assert status == 200


def test_health_and_metrics_stay_open(engine: LocalCluster) -> None:
    assert request(engine, "GET", "/health")[0] == 200
    assert request(engine, "GET", "/metrics")[0] == 200
