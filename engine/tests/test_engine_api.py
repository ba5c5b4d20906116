"""The HTTP API: the official openai client, streaming, usage, logprobs, token ids,
/tokenize, /metrics, the API key, and OpenAI-shaped 400s for bad requests.
"""

from __future__ import annotations

import http.client
import json
import random
import time
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest
from sparkengine.errors import RequestError
from sparkengine.requests import parse

pytestmark = pytest.mark.integration


def post(url: str, path: str, body: Any, raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


@pytest.fixture(scope="module")
def client(shared_cluster: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=shared_cluster.url + "/v1", api_key="unused", max_retries=0)


def test_models_lists_the_served_model(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["sparkengine"]


def test_completion_with_usage_logprobs_and_token_ids(client: openai.OpenAI) -> None:
    result = client.completions.create(
        model="sparkengine",
        prompt="Hello there",
        max_tokens=12,
        temperature=0,
        logprobs=3,
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )
    choice = result.choices[0]
    assert result.usage is not None
    assert result.usage.prompt_tokens == 12  # BOS + 11 characters
    assert result.usage.completion_tokens == 12
    assert choice.finish_reason == "length"
    assert choice.logprobs is not None
    assert len(choice.logprobs.token_logprobs or []) == 12
    assert all(len(top) == 3 for top in choice.logprobs.top_logprobs or [])
    token_ids = choice.model_extra["token_ids"]  # type: ignore[index]
    assert len(token_ids) == 12
    assert "".join(choice.logprobs.tokens or []) == choice.text


def test_streamed_chat_with_usage_matches_the_non_streamed_one(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Say something."}]
    whole = client.chat.completions.create(
        model="sparkengine", messages=messages, max_tokens=16, temperature=0, logprobs=True
    )
    stream = client.chat.completions.create(
        model="sparkengine",
        messages=messages,
        max_tokens=16,
        temperature=0,
        logprobs=True,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, logprobs, usage = "", [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            if choice.logprobs and choice.logprobs.content:
                logprobs += [c.logprob for c in choice.logprobs.content]
    assert text == whole.choices[0].message.content
    assert whole.choices[0].logprobs is not None
    assert logprobs == [c.logprob for c in whole.choices[0].logprobs.content or []]
    assert usage is not None
    assert usage.completion_tokens == whole.usage.completion_tokens  # type: ignore[union-attr]


def test_prefix_cache_hit_is_reported_as_cached_tokens(shared_cluster: Any) -> None:
    prompt = "shared prefix " * 8
    body = {"model": "sparkengine", "prompt": prompt, "max_tokens": 2, "temperature": 0}
    assert post(shared_cluster.url, "/v1/completions", body)[0] == 200
    status, again = post(shared_cluster.url, "/v1/completions", body)
    assert status == 200
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 112  # 7 full blocks


def test_stop_string_and_seeded_sampling(shared_cluster: Any) -> None:
    url = shared_cluster.url
    base = {"model": "sparkengine", "prompt": "abc", "max_tokens": 20, "ignore_eos": True}
    _, greedy = post(url, "/v1/completions", {**base, "temperature": 0})
    text = greedy["choices"][0]["text"]
    stop = text[5:7]
    _, stopped = post(url, "/v1/completions", {**base, "temperature": 0, "stop": [stop]})
    assert stopped["choices"][0]["text"] == text[: text.index(stop)]
    assert stopped["choices"][0]["finish_reason"] == "stop"
    sampled = {**base, "temperature": 1.0, "top_p": 0.9, "seed": 42}
    first = post(url, "/v1/completions", sampled)[1]["choices"][0]["text"]
    assert post(url, "/v1/completions", sampled)[1]["choices"][0]["text"] == first


def test_tokenize_gives_exact_counts(shared_cluster: Any) -> None:
    status, body = post(shared_cluster.url, "/tokenize", {"prompt": "12345"})
    assert status == 200
    assert body["count"] == 6
    assert len(body["tokens"]) == 6
    _, usage = post(
        shared_cluster.url,
        "/v1/completions",
        {"model": "sparkengine", "prompt": body["tokens"], "max_tokens": 1},
    )
    assert usage["usage"]["prompt_tokens"] == 6


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "nope", "prompt": "x"}, "model"),
        ({"model": "sparkengine", "prompt": "x", "max_tokens": -1}, "max_tokens"),
        ({"model": "sparkengine", "prompt": "x", "max_tokens": "ten"}, "max_tokens"),
        ({"model": "sparkengine", "prompt": "x" * 9000}, "prompt"),
        ({"model": "sparkengine", "prompt": 5}, "prompt"),
        ({"model": "sparkengine", "prompt": [1, 2, 1000]}, "prompt"),
        ({"model": "sparkengine", "prompt": "x", "temperature": "hot"}, "temperature"),
        ({"model": "sparkengine", "prompt": "x", "logprobs": 99}, "logprobs"),
        ({"model": "sparkengine", "prompt": "x", "stream": "yes"}, "stream"),
        ({"model": "sparkengine", "prompt": "x", "seed": -1}, "seed"),
        ({"model": "sparkengine", "prompt": "x", "top_p": 0}, "top_p"),
        ({"model": "sparkengine", "prompt": "x", "n": 2}, "n"),
        ({"model": "sparkengine", "prompt": "x", "stop": [""]}, "stop"),
        ({"model": "sparkengine", "prompt": "x", "max_tokens": 8191}, "max_tokens"),
        ([1, 2, 3], None),
    ],
)
def test_bad_requests_get_openai_shaped_400(
    shared_cluster: Any, body: Any, param: str | None
) -> None:
    status, error = post(shared_cluster.url, "/v1/completions", body)
    assert status == 400
    assert error["error"]["type"] == "invalid_request_error"
    assert error["error"]["param"] == param
    assert error["error"]["message"]


def test_invalid_json_and_bad_chat_messages(shared_cluster: Any) -> None:
    status, error = post(shared_cluster.url, "/v1/completions", None, raw=b"{not json")
    assert status == 400
    assert "JSON" in error["error"]["message"]
    status, _ = post(
        shared_cluster.url,
        "/v1/chat/completions",
        {"model": "sparkengine", "messages": [{"role": "user", "content": 3}]},
    )
    assert status == 400
    assert urllib.request.urlopen(shared_cluster.url + "/health", timeout=5).status == 200


def test_metrics_expose_the_contract_names(shared_cluster: Any) -> None:
    text = urllib.request.urlopen(shared_cluster.url + "/metrics", timeout=5).read().decode()
    for name in (
        "sparkengine_requests_running",
        "sparkengine_requests_waiting",
        "sparkengine_prompt_tokens_total",
        "sparkengine_generation_tokens_total",
        "sparkengine_prefix_cache_queries_total",
        "sparkengine_prefix_cache_hits_total",
        "sparkengine_compiles_after_freeze_total",
        "sparkengine_step_seconds_bucket",
        "sparkengine_step_seconds_count",
        "sparkengine_step_cpu_seconds_sum",
        "sparkengine_step_cpu_seconds_count",
    ):
        assert f"\n{name}" in text


def test_api_key_is_required_when_set(start_cluster: Any) -> None:
    cluster = start_cluster(nnodes=1, args=["--api-key", "s3cret"])
    cluster.wait_ready()
    denied = openai.OpenAI(base_url=cluster.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        denied.models.list()
    allowed = openai.OpenAI(base_url=cluster.url + "/v1", api_key="s3cret", max_retries=0)
    assert allowed.completions.create(model="sparkengine", prompt="x", max_tokens=2).choices


def test_client_leaving_mid_stream_frees_its_slot(shared_cluster: Any) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", shared_cluster.port, timeout=30)
    body = {"model": "sparkengine", "prompt": "x", "max_tokens": 4000, "stream": True}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    assert response.readline().startswith(b"data: ")
    conn.close()
    deadline = time.monotonic() + 30
    running = None
    while time.monotonic() < deadline:
        text = urllib.request.urlopen(shared_cluster.url + "/metrics", timeout=5).read().decode()
        running = next(
            line for line in text.splitlines() if line.startswith("sparkengine_requests_running ")
        )
        if running.endswith(" 0"):
            break
        time.sleep(0.2)
    assert running is not None
    assert running.endswith(" 0")


def test_request_parser_only_ever_raises_request_errors() -> None:
    """Fuzz: any JSON-shaped body is either accepted or a RequestError (a 400), nothing else."""
    values: list[Any] = [None, True, False, 0, -1, 1, 2.5, -0.5, 10**30, "", "x", "sparkengine"]
    values += [[], [1, 2], ["a"], [[1]], {}, {"include_usage": True}, [{"role": "user"}]]
    values += [[{"role": "user", "content": "hi"}], [{"role": 1, "content": [{"text": 2}]}]]
    keys = ["model", "prompt", "messages", "max_tokens", "temperature", "top_p", "seed", "stop"]
    keys += ["n", "stream", "stream_options", "logprobs", "top_logprobs", "ignore_eos", "echo"]
    rng = random.Random(0)
    accepted = 0
    for _ in range(3000):
        body = {k: rng.choice(values) for k in rng.sample(keys, rng.randint(0, len(keys)))}
        body.setdefault("model", "sparkengine")
        for chat in (False, True):
            try:
                parse(body, chat=chat, model_names=("sparkengine",), vocab=100, max_context=64)
                accepted += 1
            except RequestError:
                pass
    assert accepted > 0
