"""Collectives over loopback: rank-order sums, and named failures for silent or dead peers."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import numpy as np
import pytest
from sparkengine.collectives import Group, Link
from sparkengine.errors import CollectiveTimeoutError, PeerFailureError


def _star(nnodes: int, timeout: float) -> tuple[Group, list[Group]]:
    """Rank 0 plus workers, each a Group over a real loopback TCP connection."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    worker_socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(1, nnodes)]
    head_links = {rank: Link(server.accept()[0], rank) for rank in range(1, nnodes)}
    server.close()
    head = Group(0, nnodes, head_links, timeout)
    workers = [
        Group(rank, nnodes, {0: Link(sock, 0)}, timeout)
        for rank, sock in zip(range(1, nnodes), worker_socks, strict=True)
    ]
    return head, workers


@pytest.fixture
def star3() -> Iterator[tuple[Group, list[Group]]]:
    head, workers = _star(3, timeout=5.0)
    yield head, workers
    for group in [head, *workers]:
        group.close()


def test_allreduce_sums_in_rank_order_on_every_rank(star3: tuple[Group, list[Group]]) -> None:
    head, workers = star3
    rng = np.random.default_rng(0)
    parts = [(rng.standard_normal((4, 64)) * 10**r).astype(np.float32) for r in range(3)]
    results: dict[int, np.ndarray] = {}

    def run(group: Group) -> None:
        results[group.rank] = group.allreduce(parts[group.rank].copy())

    threads = [threading.Thread(target=run, args=(w,)) for w in reversed(workers)]
    for t in threads:
        t.start()
    run(head)
    for t in threads:
        t.join()
    expected = parts[0].copy()
    expected += parts[1]
    expected += parts[2]
    for rank in range(3):
        assert np.array_equal(results[rank], expected)
    assert head.seq == workers[0].seq == 1


def test_silent_peer_times_out_with_a_named_record() -> None:
    head, workers = _star(3, timeout=0.5)
    head.phase = "serve"
    # rank 1 contributes, rank 2 stays silent
    worker_errors: list[BaseException] = []

    def contribute() -> None:
        try:
            workers[0].allreduce(np.ones(4, np.float32))
        except (CollectiveTimeoutError, PeerFailureError) as exc:
            worker_errors.append(exc)

    thread = threading.Thread(target=contribute)
    thread.start()
    with pytest.raises(CollectiveTimeoutError) as err:
        head.allreduce(np.ones(4, np.float32))
    thread.join()
    assert len(worker_errors) == 1  # rank 1 heard no sum back either: it fails too, by name
    assert (err.value.peer, err.value.seq, err.value.phase) == (2, 0, "serve")
    assert err.value.timeout_s == 0.5
    for group in [head, *workers]:
        group.close()


def test_dead_peer_is_named_at_once() -> None:
    head, workers = _star(2, timeout=30.0)
    workers[0].close()
    with pytest.raises(PeerFailureError) as err:
        head.allreduce(np.ones(4, np.float32))
    assert err.value.peer == 1
    head.close()
