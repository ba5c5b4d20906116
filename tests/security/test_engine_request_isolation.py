"""Fault: a request fails inside the engine (the REQUEST_SEED fault switch makes its sampling
raise). It used to end the engine thread and the process; now only that request fails (a 500,
or an error event on its stream) and the engine serves every other request.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator

import pytest
from sparkengine.launch import LocalCluster

from .engine_server import assert_serving, completion, request, running_engine

pytestmark = pytest.mark.integration
FAILING_SEED = 4242


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    env = {"SPARKENGINE_FAULT_REQUEST_SEED": str(FAILING_SEED)}
    with running_engine(tmp_path_factory.mktemp("isolation"), env=env) as cluster:
        cluster.wait_ready()
        yield cluster


def test_a_failing_request_is_a_500_and_the_others_are_served(engine: LocalCluster) -> None:
    other: list[tuple[int, object]] = []
    slow = completion(max_tokens=200, ignore_eos=True, temperature=0)
    thread = threading.Thread(
        target=lambda: other.append(request(engine, "POST", "/v1/completions", slow))
    )
    thread.start()
    status, body = request(engine, "POST", "/v1/completions", completion(seed=FAILING_SEED))
    thread.join(120)
    assert status == 500, body
    assert "failed inside the engine" in body["error"]["message"]
    assert other
    assert other[0][0] == 200
    assert_serving(engine)
    status, _ = request(engine, "POST", "/v1/completions", completion())
    assert status == 200
    assert engine.named(0, "request_error")
    assert not engine.named(0, "fatal")


def test_a_failing_stream_ends_with_an_error_event(engine: LocalCluster) -> None:
    body = json.dumps(completion(seed=FAILING_SEED, stream=True)).encode()
    req = urllib.request.Request(
        engine.url + "/v1/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as response:
        lines = [line.decode().strip() for line in response if line.strip()]
    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2].removeprefix("data: "))["error"]
    assert "failed inside the engine" in error["message"]
    assert_serving(engine)
