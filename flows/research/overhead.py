"""Client overhead benchmark: what does our load generator cost per streamed chunk?

A paced OpenAI-style SSE server runs in its own process on a free loopback port: S streams,
all on the same tick (like one decode step for the whole batch), each chunk about 300 bytes
like vLLM's and stamped with the server's monotonic send time. Our real client
(`flows.bench.client.run_batch`) reads them; we report its CPU microseconds per chunk and the
send-to-parse lag (server write to client parsed, same clock) at the offered chunk rate.

Run `python -m flows.research.overhead [--rate 5000] [--streams 50] [--seconds 3]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import socket
import time

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from flows.bench.client import RequestSpec, Scheduled
from flows.bench.report import ClientStats, Receipt
from flows.bench.shards import run_sharded
from flows.ui.console import out_console

_PAD = "x" * 120  # brings a chunk to about vLLM's size


def _chunk(index: int, tick: int) -> bytes:
    event = {
        "id": f"cmpl-{index}",
        "object": "text_completion",
        "created": 0,
        "model": "paced",
        "choices": [{"index": 0, "text": " tok", "token_ids": [tick], "logprobs": None,
                     "finish_reason": None, "stop_reason": None, "pad": _PAD}],
        "sent_ns": time.perf_counter_ns(),
    }  # fmt: skip
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def paced_app(period_s: float, ticks: int, start_at: float) -> web.Application:
    """An SSE server whose streams each emit `ticks` chunks, one per shared tick."""

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        index = int(body.get("prompt", "0"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for tick in range(ticks):
            delay = start_at + tick * period_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await response.write(_chunk(index, tick))
        usage = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": ticks}}
        await response.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    return app


def _serve(sock: socket.socket, period_s: float, ticks: int, start_at: float) -> None:
    web.run_app(paced_app(period_s, ticks, start_at), sock=sock, print=None, handle_signals=True)


class OverheadResult(BaseModel):
    """One benchmark run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    offered_chunks_per_s: float
    achieved_chunks_per_s: float
    streams: int
    processes: int
    cpu_us_per_chunk: float | None
    send_lag_p50_ms: float | None
    send_lag_p99_ms: float | None
    loop_lag_p99_ms: float | None
    failed: int


def measure(rate: float, streams: int, seconds: float, processes: int = 1) -> OverheadResult:
    """Run the paced server in a child process and our client against it."""
    period = streams / rate
    ticks = max(1, round(seconds / period))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    start_at = time.perf_counter() + 2.0 + (1.5 if processes > 1 else 0.0)
    server = multiprocessing.get_context("fork").Process(
        target=_serve, args=(sock, period, ticks, start_at), daemon=True
    )
    server.start()
    sock.close()
    try:
        items = [
            Scheduled(spec=RequestSpec(body={"prompt": str(i), "max_tokens": ticks}))
            for i in range(streams)
        ]
        receipts, stats = run_sharded(
            f"http://127.0.0.1:{port}", items, processes=processes, start_delay_s=0.5
        )
    finally:
        server.terminate()
        server.join(5)
    return _result(rate, streams, receipts, stats)


def _result(
    rate: float, streams: int, receipts: list[Receipt], stats: ClientStats
) -> OverheadResult:
    chunks = sum(len(r.chunk_s) for r in receipts)
    arrivals = [r.sent_s + t for r in receipts for t in (r.chunk_s[:1] + r.chunk_s[-1:])]
    window = max(arrivals) - min(arrivals) if arrivals else 0.0
    return OverheadResult(
        offered_chunks_per_s=rate,
        achieved_chunks_per_s=chunks / window if window else 0.0,
        streams=streams,
        processes=stats.processes,
        cpu_us_per_chunk=stats.cpu_us_per_chunk,
        send_lag_p50_ms=stats.send_lag_p50_ms,
        send_lag_p99_ms=stats.send_lag_p99_ms,
        loop_lag_p99_ms=stats.loop_lag_p99_ms,
        failed=sum(not r.ok for r in receipts),
    )


def main(argv: list[str] | None = None) -> int:
    """Print CPU us per chunk and send-to-parse lag p99 at the given chunk rate."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5000.0, help="chunks per second offered")
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--processes", type=int, default=1, help="client processes")
    args = parser.parse_args(argv)
    result = measure(args.rate, args.streams, args.seconds, args.processes)
    out_console.print_json(result.model_dump_json())
    out_console.print(
        f"{result.offered_chunks_per_s:.0f} chunks/s offered, "
        f"{result.achieved_chunks_per_s:.0f} achieved, {result.streams} streams, "
        f"{result.processes} client process(es): {result.cpu_us_per_chunk:.1f} us CPU per chunk, "
        f"send-to-parse lag p99 {result.send_lag_p99_ms:.2f} ms, "
        f"loop lag p99 {result.loop_lag_p99_ms:.2f} ms, failed {result.failed}"
    )
    return 0 if result.failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
