"""Fault: a non-streaming client leaves mid-generation. The engine used to keep generating
(slot and KV blocks held for the whole request, ~45 s); now the request is aborted promptly.
"""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

import pytest
from sparkengine.launch import LocalCluster

from ..security.engine_server import assert_serving, completion, request, running_engine

pytestmark = pytest.mark.integration


def running(cluster: LocalCluster) -> int:
    _, text = request(cluster, "GET", "/metrics")
    match = re.search(r"^sparkengine_requests_running (\S+)$", str(text), re.MULTILINE)
    assert match, text
    return int(float(match.group(1)))


def wait_for(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_a_non_streaming_request_stops_when_its_client_leaves(tmp_path: Path) -> None:
    with running_engine(tmp_path) as cluster:
        cluster.wait_ready()
        body = json.dumps(completion(max_tokens=8000, ignore_eos=True, temperature=0)).encode()
        head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", cluster.port)) as sock:
            sock.sendall(head + body)
            assert wait_for(lambda: running(cluster) == 1, 30), "the request never ran"
        left = time.monotonic()
        assert wait_for(lambda: running(cluster) == 0, 5), "still generating after the client left"
        assert time.monotonic() - left < 5
        assert_serving(cluster)
