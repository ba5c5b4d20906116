"""The load generator against a scripted SSE server on a free loopback port.

Pins: receipts for successes and for every failure mode (no exceptions escape), token counts
from usage, token-id hashing, TTFT vs first content, chunk stamps per read, large chunks, due
times, and receipts kept in order across client processes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
from collections.abc import Iterator

import pytest
from aiohttp import web

from flows.bench.client import (
    Client,
    Recorder,
    RequestSpec,
    Scheduled,
    run_batch,
    run_sharded,
)
from flows.bench.report import Receipt
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
