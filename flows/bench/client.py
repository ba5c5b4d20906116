"""The load generator: streamed OpenAI-compatible requests, one receipt each, timed honestly.

Timing rules (see reference/serving-benchmarks.md, sections 1 and 5):
* the clock is read the moment a chunk of bytes is read, before any parsing; every event parsed
  from that read carries that stamp;
* the body is read with `iter_any()` and a 4 MiB read buffer, so long prompts and large chunks
  never hit aiohttp's line limits;
* tokens are counted from `usage` (and `token_ids` when the server returns them), never from
  chunks; TTFT is the first chunk carrying choices, TTFC the first carrying content;
* a request that fails is a receipt with `ok=False`, never an exception.
The client measures itself on every run: CPU time per chunk, read-to-parsed lag and event-loop
lateness, so a saturated client shows in the data instead of in the results. A batch can be
spread over several processes sharing one monotonic start time (`flows.bench.shards`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from flows.bench.report import ClientStats, Receipt
from flows.engine_api.sse import SseDecoder

READ_BUFSIZE = 4 * 1024 * 1024
ERROR_BODY_LIMIT = 500
Clock = Callable[[], float]


class RequestSpec(BaseModel):
    """One request to send: endpoint path and JSON body (streaming fields are added)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Literal["/v1/completions", "/v1/chat/completions"] = "/v1/completions"
    body: dict[str, JsonValue] = Field(description="OpenAI request body without stream fields")
    token_ids: bool = Field(default=True, description="ask for token ids (vLLM extension)")

    def payload(self) -> dict[str, Any]:
        """The body as sent: streaming with usage, token ids if asked."""
        extra: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
        if self.token_ids:
            extra["return_token_ids"] = True
        return {**self.body, **extra}


class Scheduled(BaseModel):
    """A request and when to send it, in seconds after the batch start."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    due_s: float = Field(default=0.0, ge=0, description="send time after the batch start")
    spec: RequestSpec


@dataclass
class Recorder:
    """Per-run measurements of the client itself (shared by the requests of one process)."""

    clock: Clock = time.perf_counter
    parse_lags: list[float] = field(default_factory=list)
    loop_lags: list[float] = field(default_factory=list)
    send_lags: list[float] = field(default_factory=list)
    chunks: int = 0

    def on_event(self, event: dict[str, Any]) -> None:
        """Hook for every parsed event; the overhead benchmark reads server stamps here."""
        sent_ns = event.get("sent_ns")
        if isinstance(sent_ns, int):
            self.send_lags.append(self.clock() - sent_ns / 1e9)


@dataclass
class _Stream:
    """Accumulates one response's events into the fields of a receipt."""

    sent: float
    ttft: float | None = None
    ttfc: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    chunk_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    done: bool = False
    error: str | None = None

    def add(self, stamp: float, event: dict[str, Any]) -> None:
        """Fold one parsed event, read at `stamp`, into the stream's times, tokens and text."""
        if "error" in event:
            self.error = f"server error event: {json.dumps(event['error'])[:ERROR_BODY_LIMIT]}"
        if event.get("usage"):
            self.usage = event["usage"]
        choices = event.get("choices") or []
        if not choices:
            return
        at = stamp - self.sent
        self.chunk_s.append(at)
        self.ttft = at if self.ttft is None else self.ttft
        choice = choices[0]
        delta = choice.get("delta") or {}
        text = choice.get("text") or delta.get("content") or delta.get("reasoning_content") or ""
        ids = choice.get("token_ids") or delta.get("token_ids") or []
        if text:
            self.text.append(text)
            self.ttfc = at if self.ttfc is None else self.ttfc
        if ids:
            self.token_ids.extend(ids)
            self.chunk_tokens.append(len(ids))
        if text or ids:
            self.first_token = at if self.first_token is None else self.first_token
            self.last_token = at
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def receipt(self, status: int | None, end: float, t0: float) -> Receipt:
        """The receipt of the finished stream; not ok without [DONE] or any choice chunk."""
        ok = self.error is None and self.done and self.ttft is not None
        error = self.error
        if error is None and not ok:
            error = "stream ended without [DONE]" if not self.done else "no choices in stream"
        if self.token_ids:
            digest, hashed = _sha256(",".join(map(str, self.token_ids))), "token_ids"
        else:
            digest, hashed = _sha256("".join(self.text)), "text"
        details = self.usage.get("prompt_tokens_details") or {}
        return Receipt(
            ok=ok,
            error=error,
            status=status,
            sent_s=self.sent - t0,
            ttft_s=self.ttft,
            ttfc_s=self.ttfc,
            first_token_s=self.first_token,
            last_token_s=self.last_token,
            end_s=end - self.sent,
            chunk_s=self.chunk_s,
            chunk_tokens=self.chunk_tokens,
            prompt_tokens=self.usage.get("prompt_tokens"),
            completion_tokens=self.usage.get("completion_tokens"),
            cached_tokens=details.get("cached_tokens"),
            finish_reason=self.finish_reason,
            output_sha256=digest,
            hashed=hashed,
        )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def send(
    session: aiohttp.ClientSession,
    base_url: str,
    spec: RequestSpec,
    *,
    t0: float,
    recorder: Recorder,
    headers: dict[str, str] | None = None,
) -> Receipt:
    """Send one streamed request and return its receipt (failures included)."""
    clock = recorder.clock
    payload = orjson.dumps(spec.payload())  # before the stamp: a 1M-token prompt takes a while
    headers = {"Content-Type": "application/json", **(headers or {})}
    sent = clock()
    stream = _Stream(sent=sent)
    status: int | None = None
    try:
        async with session.post(
            base_url.rstrip("/") + spec.path, data=payload, headers=headers
        ) as response:
            status = response.status
            if status != 200:
                body = (await response.text())[:ERROR_BODY_LIMIT]
                stream.error = f"HTTP {status}: {body}"
                return stream.receipt(status, clock(), t0)
            decoder = SseDecoder()
            async for data in response.content.iter_any():
                stamp = clock()  # before parsing: the parse cost is not the server's
                for events in decoder.feed(data):
                    if events is None:
                        stream.done = True
                        continue
                    for event in events:
                        stream.add(stamp, event)
                        recorder.on_event(event)
                        recorder.chunks += 1
                recorder.parse_lags.append(clock() - stamp)
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:  # JSON errors are ValueError
        stream.error = f"{type(error).__name__}: {error}"[:ERROR_BODY_LIMIT]
    return stream.receipt(status, clock(), t0)


def open_session(timeout_s: float) -> aiohttp.ClientSession:
    """A session with no connection cap, a large read buffer and a per-read timeout."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, force_close=False),
        read_bufsize=READ_BUFSIZE,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=timeout_s),
        auto_decompress=False,
    )


async def _ticker(recorder: Recorder, stop: asyncio.Event, period: float = 0.02) -> None:
    """Measures event-loop lateness: how late a 20 ms sleep wakes up (cheap: 50 wake-ups/s)."""
    while not stop.is_set():
        start = recorder.clock()
        await asyncio.sleep(period)
        recorder.loop_lags.append(recorder.clock() - start - period)


async def send_all(
    session: aiohttp.ClientSession,
    base_url: str,
    items: Sequence[Scheduled],
    *,
    t0: float | None = None,
    api_key: str | None = None,
    recorder: Recorder | None = None,
) -> tuple[list[Receipt], Recorder]:
    """Send every item at its due time (relative to t0) concurrently; receipts in item order."""
    recorder = recorder or Recorder()
    clock = recorder.clock
    start = clock() if t0 is None else t0
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    stop = asyncio.Event()

    async def one(item: Scheduled) -> Receipt:
        delay = start + item.due_s - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        receipt = await send(
            session, base_url, item.spec, t0=start, recorder=recorder, headers=headers
        )
        return receipt.model_copy(update={"due_s": item.due_s})

    ticker = asyncio.create_task(_ticker(recorder, stop))
    try:
        receipts = await asyncio.gather(*(one(item) for item in items))
    finally:
        stop.set()
        await ticker
    return list(receipts), recorder


async def run_batch(
    base_url: str,
    items: Sequence[Scheduled],
    *,
    t0: float | None = None,
    timeout_s: float = 600.0,
    api_key: str | None = None,
    recorder: Recorder | None = None,
) -> tuple[list[Receipt], Recorder]:
    """`send_all` on a session of its own (opened and closed around the batch)."""
    async with open_session(timeout_s) as session:
        return await send_all(session, base_url, items, t0=t0, api_key=api_key, recorder=recorder)


class Client:
    """A client that keeps one event loop and one connection pool across many batches.

    Single-process runs use it so that setting up a loop and connections is not paid (and not
    counted as load-generation CPU) for every sample. Close it when done.
    """

    def __init__(self, base_url: str, *, timeout_s: float = 600.0, api_key: str | None = None):
        self.base_url = base_url
        self.api_key = api_key
        self._runner = asyncio.Runner()
        self._session = self._runner.run(self._open(timeout_s))

    @staticmethod
    async def _open(timeout_s: float) -> aiohttp.ClientSession:
        return open_session(timeout_s)

    def run(self, items: Sequence[Scheduled]) -> tuple[list[Receipt], ClientStats]:
        """Send a batch now; its receipts and the client's cost while sending it."""
        wall, cpu = time.perf_counter(), time.process_time()
        receipts, rec = self._runner.run(
            send_all(self._session, self.base_url, items, api_key=self.api_key)
        )
        shard = ShardResult(
            receipts=receipts,
            cpu_s=time.process_time() - cpu,
            chunks=rec.chunks,
            parse_lags=rec.parse_lags,
            loop_lags=rec.loop_lags,
            send_lags=rec.send_lags,
        )
        return receipts, client_stats([shard], time.perf_counter() - wall)

    def close(self) -> None:
        """Close the connections and the event loop."""
        self._runner.run(self._session.close())
        self._runner.close()


@dataclass
class ShardResult:
    """What one client process sends back: receipts and its raw self-measurements."""

    receipts: list[Receipt]
    cpu_s: float
    chunks: int
    parse_lags: list[float]
    loop_lags: list[float]
    send_lags: list[float]


def run_shard(
    base_url: str, items: list[Scheduled], t0: float, timeout_s: float, api_key: str | None
) -> ShardResult:
    """One process's share of a batch, sent from t0 on a loop and session of its own."""
    cpu = time.process_time()
    receipts, rec = asyncio.run(
        run_batch(base_url, items, t0=t0, timeout_s=timeout_s, api_key=api_key)
    )
    return ShardResult(
        receipts=receipts,
        cpu_s=time.process_time() - cpu,
        chunks=rec.chunks,
        parse_lags=rec.parse_lags,
        loop_lags=rec.loop_lags,
        send_lags=rec.send_lags,
    )


def _p(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) * 1e3 if values else None


def client_stats(shards: Sequence[ShardResult], wall_s: float) -> ClientStats:
    """Merge the self-measurements of every client process of a run."""
    chunks = sum(s.chunks for s in shards)
    cpu = sum(s.cpu_s for s in shards)
    parse = [x for s in shards for x in s.parse_lags]
    loop = [x for s in shards for x in s.loop_lags]
    send_lags = [x for s in shards for x in s.send_lags]
    return ClientStats(
        processes=len(shards),
        wall_s=wall_s,
        cpu_s=cpu,
        chunks=chunks,
        cpu_us_per_chunk=1e6 * cpu / chunks if chunks else None,
        parse_lag_p50_ms=_p(parse, 50),
        parse_lag_p99_ms=_p(parse, 99),
        loop_lag_p99_ms=_p(loop, 99),
        send_lag_p50_ms=_p(send_lags, 50),
        send_lag_p99_ms=_p(send_lags, 99),
    )
