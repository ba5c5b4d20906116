"""The load generator against a scripted SSE server on a free loopback port.

Pins: receipts for successes and for every failure mode (no exceptions escape), token counts
from usage, token-id hashing, TTFT vs first content, chunk stamps per read, large chunks, due
times, and receipts kept in order across client processes; client processes kept across
batches, started together once every one holds its shard, and a stuck or dead one a bench error.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import multiprocessing
import os
import socket
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection

import pytest
from aiohttp import web

from flows.bench import shards
from flows.bench.client import (
    Client,
    Recorder,
    RequestSpec,
    Scheduled,
    run_batch,
)
from flows.bench.report import Receipt
from flows.bench.shards import START_MARGIN_S, ShardPool, run_sharded
from flows.errors import BenchError
from tests.support.servers import serving


def _sse(event: object) -> bytes:
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def _tokens(n: int, start: int) -> list[bytes]:
    return [
        _sse({"choices": [{"index": 0, "text": f"t{start + i}", "token_ids": [start + i],
                           "finish_reason": "length" if i == n - 1 else None}]})
        for i in range(n)
    ]  # fmt: skip


USAGE = _sse(
    {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4,
                              "prompt_tokens_details": {"cached_tokens": 3}}}
)  # fmt: skip


async def _script(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    mode = body.get("prompt") if "prompt" in body else "chat"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    if mode == "http500":
        return web.Response(status=500, text="engine on fire")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    if mode == "chat":
        await response.write(_sse({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}))
        await asyncio.sleep(0.02)
        await response.write(_sse({"choices": [{"index": 0, "delta": {"content": "hi"}}]}))
    elif mode == "garbage":
        await response.write(b"data: {not json\n\n")
    elif mode == "error_event":
        await response.write(_sse({"error": {"message": "boom", "code": 500}}))
    elif mode == "huge":
        await response.write(_sse({"choices": [{"index": 0, "text": "x" * 300_000}]}))
    elif mode.startswith("echo"):
        n = int(mode[4:])
        await response.write(b"".join(_tokens(1, n)))
    else:
        chunks = _tokens(4, 100)
        blob = b": ping\n\n" + b"".join(chunks[:2])
        await response.write(blob[:25])  # a message split across reads
        await response.write(blob[25:])
        for chunk in chunks[2:]:
            await asyncio.sleep(0.02)
            await response.write(chunk)
    if mode != "truncated":
        await response.write(USAGE + b"data: [DONE]\n\n")
    return response


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The scripted server in its own thread and loop (so forked clients can reach it)."""
    app = web.Application()
    app.router.add_post("/v1/completions", _script)
    app.router.add_post("/v1/chat/completions", _script)
    with serving(app) as url:
        yield url


def _one(url: str, prompt: str | None = None, chat: bool = False) -> tuple[Receipt, Recorder]:
    spec = (
        RequestSpec(path="/v1/chat/completions", body={"messages": []})
        if chat
        else RequestSpec(body={"prompt": prompt})
    )
    receipts, recorder = asyncio.run(run_batch(url, [Scheduled(spec=spec)]))
    return receipts[0], recorder


def test_success_receipt(server: str) -> None:
    receipt, recorder = _one(server, "ok")
    assert receipt.ok, receipt.error
    assert receipt.status == 200
    assert (receipt.prompt_tokens, receipt.completion_tokens, receipt.cached_tokens) == (7, 4, 3)
    assert receipt.finish_reason == "length"
    assert receipt.chunk_tokens == [1, 1, 1, 1]
    assert receipt.hashed == "token_ids"
    assert receipt.output_sha256 == hashlib.sha256(b"100,101,102,103").hexdigest()
    assert len(receipt.chunk_s) == 4
    assert receipt.chunk_s == sorted(receipt.chunk_s)
    assert receipt.chunk_s[0] == receipt.chunk_s[1]  # one read, one stamp
    assert receipt.ttft_s == receipt.first_token_s == receipt.chunk_s[0]
    assert receipt.last_token_s == receipt.chunk_s[-1] < receipt.end_s
    assert receipt.tpot_s == pytest.approx((receipt.chunk_s[-1] - receipt.chunk_s[0]) / 3)
    assert recorder.chunks >= 5
    assert recorder.parse_lags


def test_ttft_counts_a_role_only_chunk_but_ttfc_waits_for_content(server: str) -> None:
    receipt, _ = _one(server, chat=True)
    assert receipt.ok
    assert receipt.ttft_s is not None
    assert receipt.ttfc_s is not None
    assert receipt.ttft_s < receipt.ttfc_s
    assert receipt.hashed == "text"
    assert receipt.output_sha256 == hashlib.sha256(b"hi").hexdigest()


@pytest.mark.parametrize(
    ("prompt", "status", "message"),
    [
        ("http500", 500, "HTTP 500: engine on fire"),
        ("truncated", 200, "stream ended without [DONE]"),
        ("garbage", 200, "JSONDecodeError"),
        ("error_event", 200, "server error event"),
    ],
)
def test_failures_are_receipts(server: str, prompt: str, status: int, message: str) -> None:
    receipt, _ = _one(server, prompt)
    assert not receipt.ok
    assert receipt.status == status
    assert message in (receipt.error or "")


def test_unreachable_server_is_a_receipt() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here now
    receipt, _ = _one(f"http://127.0.0.1:{port}", "ok")
    assert not receipt.ok
    assert receipt.status is None
    assert "ClientConnectorError" in (receipt.error or "")


def test_a_chunk_larger_than_aiohttp_line_limits_is_read(server: str) -> None:
    receipt, _ = _one(server, "huge")
    assert receipt.ok, receipt.error
    assert receipt.hashed == "text"
    assert receipt.output_sha256 == hashlib.sha256(b"x" * 300_000).hexdigest()


def test_due_times_are_respected_and_recorded(server: str) -> None:
    items = [Scheduled(due_s=d, spec=RequestSpec(body={"prompt": "ok"})) for d in (0.0, 0.15)]
    receipts, _ = asyncio.run(run_batch(server, items))
    assert [r.due_s for r in receipts] == [0.0, 0.15]
    assert all(r.sent_s >= r.due_s for r in receipts if r.due_s is not None)
    assert receipts[1].sent_s > receipts[0].sent_s


def test_sharded_run_keeps_receipts_in_order(server: str) -> None:
    items = [Scheduled(spec=RequestSpec(body={"prompt": f"echo{i}"})) for i in range(6)]
    receipts, stats = run_sharded(server, items, processes=2)
    assert stats.processes == 2
    assert stats.chunks >= 6
    assert stats.cpu_s > 0
    expected = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(6)]
    assert [r.output_sha256 for r in receipts] == expected


def test_a_client_reuses_its_loop_and_connections_across_batches(server: str) -> None:
    client = Client(server)
    try:
        first, stats = client.run([Scheduled(spec=RequestSpec(body={"prompt": "echo1"}))])
        second, _ = client.run([Scheduled(spec=RequestSpec(body={"prompt": "echo2"}))] * 2)
    finally:
        client.close()
    assert first[0].ok
    assert [r.ok for r in second] == [True, True]
    assert stats.processes == 1
    assert stats.chunks >= 1


def _echo(n: int) -> list[Scheduled]:
    return [Scheduled(spec=RequestSpec(body={"prompt": f"echo{i}"})) for i in range(n)]


def _digests(n: int) -> list[str]:
    return [hashlib.sha256(str(i).encode()).hexdigest() for i in range(n)]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_shard_pool_keeps_its_processes_across_batches_and_stops_them_on_close(
    server: str,
) -> None:
    """One set of client processes serves every batch (no pool start per batch); receipts stay
    in item order whatever the shard sizes; after close none of the processes is left."""
    pool = ShardPool(server)
    started: list[tuple[int, ...]] = []
    with pool:
        assert pool.pids == []  # nothing started before a batch needs it
        for n in (6, 5, 4):
            receipts, stats = pool.run(_echo(n), 2)
            assert [r.output_sha256 for r in receipts] == _digests(n)
            assert stats.processes == 2
            assert pool.last_start is not None
            started.append(pool.last_start.pids)
        pids = pool.pids
    assert started == [tuple(pids)] * 3
    assert len(set(pids)) == 2
    assert pool.pids == []
    assert all(_gone(pid) for pid in pids)


def test_a_batch_starts_a_margin_after_the_last_process_is_ready(server: str) -> None:
    """The common start is set once every process holds its shard, START_MARGIN_S after the
    release: no fixed guess, and no shard that is still being shipped when the others start."""
    with ShardPool(server) as pool:
        receipts, _ = pool.run(_echo(4), 2)
        grown, _ = pool.run(_echo(6), 3)  # a batch needing one more process starts it
        start = pool.last_start
    assert start is not None
    assert len(start.ready_s) == len(set(start.pids)) == 3
    assert max(start.ready_s) <= start.released_s
    assert start.t0 == start.released_s + START_MARGIN_S
    assert all(r.ok and r.sent_s >= 0 for r in receipts + grown)
    assert [r.output_sha256 for r in grown] == _digests(6)


def _stuck_second_process(conn: Connection) -> list[Scheduled] | None:
    """Stands in for receiving a shard: the second client process never gets it."""
    if multiprocessing.current_process().name.endswith("-1"):
        time.sleep(60)
    return ORIGINAL_NEXT_SHARD(conn)


def _dying_process(conn: Connection) -> list[Scheduled] | None:
    """Stands in for receiving a shard: the client process dies instead."""
    os._exit(3)


ORIGINAL_NEXT_SHARD = shards._next_shard


def test_a_process_that_never_gets_ready_is_a_bench_error_not_a_hang(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch ends when the ready timeout passes, naming the one late process; no request is
    sent and the pool's processes are stopped (forked processes inherit the patch)."""
    monkeypatch.setattr(shards, "_next_shard", _stuck_second_process)
    pool = ShardPool(server, ready_timeout_s=0.5)
    with pool, pytest.raises(BenchError, match=r"^client process \d+ not ready within 0\.5 s"):
        pool.run(_echo(4), 2)
    assert pool.pids == []
    assert multiprocessing.active_children() == []


def test_a_process_that_dies_before_it_is_ready_is_a_bench_error(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead process is reported at once with its exit code, not after the ready timeout."""
    monkeypatch.setattr(shards, "_next_shard", _dying_process)
    with ShardPool(server) as pool, pytest.raises(BenchError, match=r"exited \(code 3\)"):
        pool.run(_echo(2), 2)
    assert multiprocessing.active_children() == []
