"""Attacks on the engine's memory with open connections.

Every connection may hold a request body of up to --max-body-bytes while it arrives; 1,477
clients each trickling 2 MB exhausted the engine's memory, with no cap on connections and no
time limit on a body. Now at most --max-connections are open (one more is answered 503 and
closed), a connection must send its request head within --read-timeout and its body within
--read-timeout more (else closed, or 408), so slow clients give their memory back.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sparkengine.launch import LocalCluster

from .engine_server import assert_serving, running_engine

pytestmark = pytest.mark.integration
CAP, TIMEOUT, BODY = 16, 3.0, 256 << 10
ARGS = ["--max-connections", str(CAP), "--read-timeout", str(TIMEOUT)]
ARGS += ["--max-body-bytes", str(BODY)]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_engine(tmp_path_factory.mktemp("connections"), args=ARGS) as cluster:
        cluster.wait_ready()
        yield cluster


def rss_mib(engine: LocalCluster) -> float:
    status = Path(f"/proc/{engine.procs[0].pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def partial_body(engine: LocalCluster) -> socket.socket:
    """A connection that sends a request head and half of its body, then nothing."""
    sock = socket.create_connection(("127.0.0.1", engine.port), timeout=TIMEOUT + 10)
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {BODY - 1}\r\n\r\n"
    )
    sock.sendall(head.encode() + b" " * (BODY // 2))
    return sock


def answer(sock: socket.socket) -> bytes:
    """Everything the engine sent before it closed the connection."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass  # closed with our unread bytes: what it sent before still counts
    sock.close()
    return received


def test_many_partial_bodies_are_capped_timed_out_and_give_their_memory_back(
    engine: LocalCluster,
) -> None:
    before = rss_mib(engine)
    started = time.perf_counter()
    socks = [partial_body(engine) for _ in range(4 * CAP)]
    answers = [answer(sock) for sock in socks]
    took = time.perf_counter() - started
    refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
    timed_out = [a for a in answers if a.startswith(b"HTTP/1.1 408")]
    assert len(refused) == 3 * CAP, answers[-1][:200]
    assert all(b"too_many_connections" in a for a in refused)
    assert len(timed_out) == CAP, "partial bodies were not cut off"
    assert all(b"did not arrive within 3 s" in a for a in timed_out)
    assert len(refused) + len(timed_out) == len(answers)
    assert took < TIMEOUT + 5, f"held {took:.1f} s"
    assert assert_serving(engine) < 2.0
    assert rss_mib(engine) - before < 64, "partial bodies kept their memory"


def test_a_silent_connection_is_closed_after_the_read_timeout(engine: LocalCluster) -> None:
    sock = socket.create_connection(("127.0.0.1", engine.port), timeout=TIMEOUT + 10)
    started = time.perf_counter()
    assert answer(sock) == b""
    assert TIMEOUT - 0.5 < time.perf_counter() - started < TIMEOUT + 5


def test_a_flood_leaves_the_engine_serving_once_it_stops(engine: LocalCluster) -> None:
    socks = [
        socket.create_connection(("127.0.0.1", engine.port), timeout=TIMEOUT + 10)
        for _ in range(CAP * 8)
    ]
    for sock in socks:
        sock.close()
    deadline = time.monotonic() + TIMEOUT + 5
    while time.monotonic() < deadline:
        try:
            assert_serving(engine)
            return
        except AssertionError:
            time.sleep(0.2)
    pytest.fail("the engine did not serve again after a flood of connections")
