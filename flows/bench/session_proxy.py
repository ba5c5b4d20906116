"""`sparkgate bench record`: a recording proxy in front of an OpenAI-compatible endpoint.

An agent (or any client) is pointed at the proxy instead of the engine; every request is
forwarded unchanged and its response streamed back chunk by chunk as it arrives, so the agent
sees the engine's own timing. Each completion exchange is appended to the session file the
moment it ends (`flows.bench.session_file`), headers and body redacted by `flows.secrets`:
Authorization, cookies, API keys and any value the recorder names never reach the file.
Turns are numbered in the order their responses ended.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import aiohttp
from aiohttp import web
from pydantic import JsonValue

from flows.bench.session_file import SessionHeader, Turn, append_line, header_line, turn_line
from flows.engine_api.sse import SseDecoder
from flows.errors import BenchError, SpecError
from flows.lines import LineSink, silent
from flows.secrets import REDACTED, SECRET_HEADERS, Secrets, credential

RECORDED_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
        "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding",
        "content-encoding",
    }
)  # fmt: skip
"""Headers that describe one connection, not the request; `accept-encoding` is dropped so the
upstream answers uncompressed and its stream can be read as it passes."""
READ_BUFSIZE = 4 * 1024 * 1024


def _secret_header(name: str, secrets: Secrets) -> bool:
    return name.lower() in SECRET_HEADERS or secrets.secret(name)


def header_secrets(headers: dict[str, str], secrets: Secrets) -> Secrets:
    """`secrets` plus the values of the request's secret headers (a bearer key without its
    scheme word), so a key the agent also pasted into a prompt is scrubbed there too."""
    values = [credential(v) for k, v in headers.items() if _secret_header(k, secrets)]
    return secrets.merged(Secrets(values=tuple(v for v in values if v)))


def redact_headers(headers: dict[str, str], secrets: Secrets) -> dict[str, str]:
    """Request headers as recorded: connection headers gone, secret ones redacted."""
    out = {}
    for name, value in headers.items():
        if name.lower() in HOP_BY_HOP:
            continue
        out[name] = REDACTED if _secret_header(name, secrets) else secrets.text(value)
    return out


@dataclass
class _Exchange:
    """What the proxy saw of one response while passing it on."""

    sent: float
    first: float | None = None
    usage: dict[str, JsonValue] = field(default_factory=dict)
    decoder: SseDecoder = field(default_factory=SseDecoder)

    def feed(self, stamp: float, data: bytes) -> None:
        """Fold streamed bytes in: the first chunk with choices, and the last usage."""
        try:
            for events in self.decoder.feed(data):
                for event in events or []:
                    if event.get("choices") and self.first is None:
                        self.first = stamp
                    if isinstance(event.get("usage"), dict):
                        self.usage = event["usage"]
        except ValueError:  # not SSE JSON: pass it on, record no usage
            return

    def whole(self, stamp: float, body: bytes) -> None:
        """A response read at once (not streamed): its usage, first byte = end."""
        self.first = stamp
        try:
            data = json.loads(body)
        except ValueError:
            return
        if isinstance(data, dict) and isinstance(data.get("usage"), dict):
            self.usage = data["usage"]


@dataclass
class Recorder:
    """The proxy's state: where it forwards, where it writes, and the session clock."""

    upstream: str
    out: IO[str]
    secrets: Secrets
    stop_after: int | None = None
    say: LineSink = silent
    clock: Callable[[], float] = time.monotonic
    started: float = 0.0
    last_end: float | None = None
    turns: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def begin(self, note: str = "") -> None:
        """Write the header line and start the session clock."""
        self.started = self.clock()
        upstream = self.secrets.text(self.upstream)
        recorded = datetime.now(UTC).isoformat(timespec="seconds")
        header = SessionHeader(recorded_utc=recorded, upstream=upstream, note=note)
        append_line(self.out, header_line(header))

    def record(self, request: _Request, exchange: _Exchange, status: int, end: float) -> None:
        """Append one finished exchange as a turn."""
        gap = 0.0 if self.last_end is None else max(0.0, exchange.sent - self.last_end)
        secrets = header_secrets(request.headers, self.secrets)
        turn = Turn(
            index=self.turns,
            path=request.path,  # one of RECORDED_PATHS, validated
            body=secrets.json(request.body),
            headers=redact_headers(request.headers, secrets),
            sent_s=exchange.sent - self.started,
            gap_s=gap,
            status=status,
            ttft_s=None if exchange.first is None else exchange.first - exchange.sent,
            duration_s=end - exchange.sent,
            usage=exchange.usage,
        )
        append_line(self.out, turn_line(turn))
        self.turns += 1
        self.last_end = end if self.last_end is None else max(self.last_end, end)
        prompt, cached = _usage_counts(exchange.usage)
        self.say(f"turn {turn.index}: HTTP {status}, prompt {prompt}, cached {cached}")
        if self.stop_after is not None and self.turns >= self.stop_after:
            self.done.set()


def _usage_counts(usage: dict[str, JsonValue]) -> tuple[object, object]:
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return usage.get("prompt_tokens", "?"), "?" if cached is None else cached


@dataclass
class _Request:
    """The parts of an incoming request the proxy forwards and records."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    raw: bytes
    body: dict[str, JsonValue] | None


async def _incoming(request: web.Request) -> _Request:
    raw = await request.read()
    body: Any = None
    if request.method == "POST" and request.path in RECORDED_PATHS:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
    return _Request(
        method=request.method,
        path=request.path,
        query=request.query_string,
        headers=dict(request.headers),
        raw=raw,
        body=body if isinstance(body, dict) else None,
    )


UPSTREAM = web.AppKey("upstream", aiohttp.ClientSession)


async def _upstream_session(app: web.Application) -> AsyncIterator[None]:
    """One connection pool to the upstream for the proxy's life; no total timeout (a long
    prefill may stay silent for minutes)."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)
    async with aiohttp.ClientSession(
        timeout=timeout, read_bufsize=READ_BUFSIZE, auto_decompress=False
    ) as session:
        app[UPSTREAM] = session
        yield


def make_app(recorder: Recorder) -> web.Application:
    """The proxy: every path forwarded; completion exchanges recorded as they end."""

    async def handle(request: web.Request) -> web.StreamResponse:
        upstream = request.app[UPSTREAM]
        incoming = await _incoming(request)
        headers = {k: v for k, v in incoming.headers.items() if k.lower() not in HOP_BY_HOP}
        url = recorder.upstream.rstrip("/") + incoming.path
        if incoming.query:
            url += "?" + incoming.query
        exchange = _Exchange(sent=recorder.clock())
        try:
            async with upstream.request(
                incoming.method, url, data=incoming.raw, headers=headers
            ) as reply:
                status = reply.status
                passed = {k: v for k, v in reply.headers.items() if k.lower() not in HOP_BY_HOP}
                if reply.content_type == "text/event-stream":
                    response = web.StreamResponse(status=status, headers=passed)
                    await response.prepare(request)
                    try:
                        async for data in reply.content.iter_any():
                            exchange.feed(recorder.clock(), data)
                            await response.write(data)
                    except (aiohttp.ClientError, TimeoutError):
                        pass  # the upstream broke off: the client sees the stream end early
                    finally:  # on disk before the client sees the end (or the client left)
                        _maybe_record(recorder, incoming, exchange, status)
                    await response.write_eof()
                    return response
                body = await reply.read()
                exchange.whole(recorder.clock(), body)
                _maybe_record(recorder, incoming, exchange, status)
                return web.Response(status=status, body=body, headers=passed)
        except (aiohttp.ClientError, TimeoutError) as error:
            message = json.dumps({"error": {"message": f"upstream: {error}", "type": "proxy"}})
            return web.Response(status=502, text=message, content_type="application/json")

    app = web.Application(client_max_size=256 << 20)
    app.cleanup_ctx.append(_upstream_session)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def _maybe_record(recorder: Recorder, request: _Request, exchange: _Exchange, status: int) -> None:
    if request.body is not None:
        recorder.record(request, exchange, status, recorder.clock())


async def serve(recorder: Recorder, host: str, port: int, *, note: str = "") -> int:
    """Run the proxy until SIGINT/SIGTERM (or `stop_after` turns); the turns recorded.

    Raises:
        BenchError: when the port cannot be bound.
    """
    runner = web.AppRunner(make_app(recorder), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as error:
        await runner.cleanup()
        raise BenchError(f"cannot listen on {host}:{port}: {error.strerror}") from error
    recorder.begin(note)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, recorder.done.set)
    recorder.say(f"recording http://{host}:{port} -> {recorder.upstream} (Ctrl-C ends)")
    try:
        await recorder.done.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await runner.cleanup()
    return recorder.turns


def record_session(
    upstream: str,
    out: Path,
    *,
    host: str,
    port: int,
    secrets: Secrets,
    stop_after: int | None = None,
    note: str = "",
    say: LineSink = silent,
) -> int:
    """Record a session into a new file `out`; the number of turns recorded.

    Raises:
        SpecError: when `out` exists (a session is never appended to another).
        BenchError: when the port cannot be bound.
    """
    if not upstream.startswith(("http://", "https://")):
        raise BenchError(f"{upstream}: not an http(s) URL")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        stream = out.open("x")
    except FileExistsError:
        message = "exists; a session is recorded into a new file"
        raise SpecError(message, file=out, key="--out", expected="a path not yet taken") from None
    with stream:

        async def main() -> int:
            recorder = Recorder(upstream, stream, secrets, stop_after=stop_after, say=say)
            return await serve(recorder, host, port, note=note)

        try:
            return asyncio.run(main())
        except BenchError:
            if out.stat().st_size == 0:  # nothing recorded (the port was taken): no file left
                out.unlink()
            raise
