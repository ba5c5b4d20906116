"""The requests the output gates send: greedy completions with logprobs and token ids, and streams.

Asynchronous I/O only; what is compared lives in `flows.gates.outputs`. Greedy requests are
non-streamed so the raw body can be kept as received; the sampled streams and the cold-boot
burst stream, so the engine's streaming path runs too. A failed request raises GateError naming
the prompt and the HTTP status, never a partial result.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp

from flows.engine_api.sse import SseDecoder
from flows.errors import GateError
from flows.gates.outputs import Output
from flows.gates.prompts import Prompt

REQUEST_TIMEOUT_S = 600.0
_ERROR_CHARS = 300


@dataclass(frozen=True)
class Client:
    """An HTTP session bound to one engine: base URL, served model, alternatives per token."""

    session: aiohttp.ClientSession
    base_url: str
    model: str
    top_logprobs: int
    origin: float

    def clock(self) -> float:
        """Seconds since the client was opened."""
        return time.monotonic() - self.origin


@dataclass(frozen=True)
class Answered:
    """A greedy request's raw response and when it was sent and answered (client clock)."""

    prompt: str
    sent_s: float
    answered_s: float
    response: dict[str, Any]


@asynccontextmanager
async def open_client(base_url: str, top_logprobs: int) -> AsyncIterator[Client]:
    """A client for the served model (the first one GET /v1/models lists)."""
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        models = await _get_json(session, f"{base_url}/v1/models")
        data = models.get("data") or []
        if not data:
            raise GateError(f"{base_url}/v1/models lists no model")
        yield Client(session, base_url, str(data[0]["id"]), top_logprobs, time.monotonic())


def _body(client: Client, prompt: Prompt, temperature: float) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": client.model,
        "prompt": prompt.text,
        "max_tokens": prompt.max_tokens,
        "temperature": temperature,
        "ignore_eos": True,
        "logprobs": client.top_logprobs,
        "return_token_ids": True,
    }
    return body


async def complete(client: Client, prompt: Prompt, *, delay_s: float = 0.0) -> Answered:
    """One greedy (temperature 0) completion, sent after `delay_s`."""
    if delay_s > 0:
        await asyncio.sleep(delay_s)
    sent = client.clock()
    url = f"{client.base_url}/v1/completions"
    async with client.session.post(url, json=_body(client, prompt, 0.0)) as response:
        text = await response.text()
        if response.status != 200:
            raise GateError(f"prompt {prompt.id}: HTTP {response.status}: {text[:_ERROR_CHARS]}")
    answered = client.clock()
    try:
        body = json.loads(text)
    except ValueError as error:
        raise GateError(f"prompt {prompt.id}: the answer is not JSON: {error}") from error
    if not isinstance(body, dict) or not body.get("choices"):
        raise GateError(f"prompt {prompt.id}: no choices in the answer: {text[:_ERROR_CHARS]}")
    return Answered(prompt.id, sent, answered, body)


async def stream(
    client: Client, prompt: Prompt, *, temperature: float, delay_s: float = 0.0
) -> Output:
    """One streamed completion, assembled from its chunks (tokens, logprobs, usage)."""
    if delay_s > 0:
        await asyncio.sleep(delay_s)
    body = {
        **_body(client, prompt, temperature),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    tokens: list[int] = []
    logprobs: list[float | None] = []
    top: list[list[tuple[str, float]] | None] = []
    text: list[str] = []
    cached = None
    async with client.session.post(f"{client.base_url}/v1/completions", json=body) as response:
        if response.status != 200:
            detail = (await response.text())[:_ERROR_CHARS]
            raise GateError(f"stream {prompt.id}: HTTP {response.status}: {detail}")
        decoder, chunks = SseDecoder(), list[dict[str, Any]]()
        async for raw in response.content.iter_any():
            chunks.extend(event for events in decoder.feed(raw) for event in events or [])
        chunks.extend(event for events in decoder.finish() for event in events or [])
        for chunk in chunks:
            for choice in chunk.get("choices") or []:
                tokens.extend(int(t) for t in choice.get("token_ids") or [])
                text.append(str(choice.get("text") or ""))
                lp = choice.get("logprobs") or {}
                logprobs.extend(lp.get("token_logprobs") or [])
                top.extend(
                    None if t is None else list(t.items()) for t in lp.get("top_logprobs") or []
                )
            usage = chunk.get("usage") or {}
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", cached)
    if len(tokens) != prompt.max_tokens:
        raise GateError(f"stream {prompt.id}: {len(tokens)} tokens, asked {prompt.max_tokens}")
    return Output(
        prompt=prompt.id,
        token_ids=tokens,
        logprobs=logprobs,
        top=top,
        text="".join(text),
        cached_tokens=cached,
    )


async def _get_json(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    try:
        async with session.get(url) as response:
            if response.status != 200:
                raise GateError(f"{url}: HTTP {response.status}")
            body = await response.json(content_type=None)
    except aiohttp.ClientError as error:
        raise GateError(f"{url}: {error}") from error
    if not isinstance(body, dict):
        raise GateError(f"{url}: not a JSON object")
    return body
