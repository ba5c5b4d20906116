"""OpenAI-compatible HTTP API on rank 0 (aiohttp), plus /tokenize, /health and /metrics.

Handlers turn validated requests into engine sequences and stream tokens back as they come.
Bad input of any kind answers 400 in OpenAI's error shape (413 for a body over the cap); an
unexpected failure answers 500 (or an error event on a stream) and the server keeps running.
Decoding, validating and tokenizing a body run in a worker thread, so no request holds the
event loop, and every route but /health and /metrics needs the API key when one is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from sparkengine import events, tokenizer
from sparkengine.connections import DEFAULT_READ_TIMEOUT
from sparkengine.engine import HeadEngine
from sparkengine.errors import RequestError, RequestFailedError
from sparkengine.metrics import Metrics
from sparkengine.requests import Limits, Parsed, chat_prompt, parse
from sparkengine.scheduler import Sequence, TokenOut
from sparkengine.structured import render

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPEN_PATHS = frozenset({"/health", "/metrics"})  # reachable without the API key
DEFAULT_MAX_BODY = 2 << 20


class BodyTimeoutError(Exception):
    """A request body still arriving after read_timeout (a 408, and the connection closed)."""


def error_response(
    status: int, message: str, param: str | None = None, code: Any = None
) -> web.Response:
    """OpenAI's error body."""
    kind = "invalid_request_error" if status < 500 else "internal_server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status)


@dataclass
class Generation:
    """Tokens of one request so far, with stop-string handling and held-back text."""

    parsed: Parsed
    outs: list[TokenOut] = field(default_factory=list)
    text: str = ""
    sent: int = 0
    finish_reason: str | None = None
    cached_tokens: int = 0

    def add(self, out: TokenOut) -> None:
        """Append a token; detect stop strings and the end."""
        self.outs.append(out)
        self.cached_tokens = out.cached_tokens
        if out.token != tokenizer.EOS:
            self.text += tokenizer.token_text(out.token)
        for stop in self.parsed.stop:
            at = self.text.find(stop)
            if at >= 0:
                self.text = self.text[:at]
                self.finish_reason = "stop"
                return
        self.finish_reason = out.finish_reason

    def take_text(self) -> str:
        """Text safe to send now (never part of a possible stop string)."""
        hold = 0 if self.finish_reason else max((len(s) - 1 for s in self.parsed.stop), default=0)
        end = max(self.sent, len(self.text) - hold)
        piece, self.sent = self.text[self.sent : end], end
        return piece

    def usage(self) -> dict[str, Any]:
        """The usage object."""
        prompt = len(self.parsed.prompt)
        done = len(self.outs)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": done,
            "total_tokens": prompt + done,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


def _decode(raw: bytes) -> Any:
    """A request body as JSON, or a RequestError (never a crash, however it is nested)."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise RequestError("request body is not valid JSON") from None


def completion_logprobs(outs: list[TokenOut], offset: int) -> dict[str, Any]:
    """Legacy completions logprobs object."""
    texts = [tokenizer.token_text(o.token) for o in outs]
    offsets = []
    for t in texts:
        offsets.append(offset)
        offset += len(t)
    return {
        "tokens": texts,
        "token_logprobs": [o.logprob for o in outs],
        "top_logprobs": [
            {tokenizer.token_text(t): lp for t, lp in o.top} if o.top is not None else None
            for o in outs
        ],
        "text_offset": offsets,
    }


def _entry(token: int, logprob: float) -> dict[str, Any]:
    text = tokenizer.token_text(token)
    return {"token": text, "logprob": logprob, "bytes": list(text.encode())}


def chat_logprobs(outs: list[TokenOut]) -> dict[str, Any]:
    """Chat logprobs object."""
    content = []
    for o in outs:
        entry = _entry(o.token, o.logprob)
        entry["top_logprobs"] = [_entry(t, lp) for t, lp in (o.top or [])]
        content.append(entry)
    return {"content": content}


class Api:
    """Routes bound to one engine."""

    def __init__(
        self,
        engine: HeadEngine,
        metrics: Metrics,
        *,
        model_name: str,
        model_dir: str,
        max_context: int,
        vocab: int,
        api_key: str | None,
        limits: Limits | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.model_name = model_name
        self.names = (model_name, model_dir)
        self.max_context = max_context
        self.vocab = vocab
        self.api_key = api_key
        self.limits = limits or Limits()
        self.max_body = max_body
        self.read_timeout = read_timeout
        self.created = int(time.time())

    def app(self, *middlewares: Any) -> web.Application:
        """The aiohttp application (`middlewares` run before the API's own)."""
        app = web.Application(
            middlewares=[*middlewares, self._errors], client_max_size=self.max_body
        )
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics_text)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.api_key and request.path not in OPEN_PATHS and not self._authorized(request):
            return error_response(401, "invalid or missing API key", code="invalid_api_key")
        try:
            return await handler(request)
        except RequestError as exc:
            return error_response(400, str(exc), exc.param, exc.code)
        except (BodyTimeoutError, web.HTTPRequestEntityTooLarge) as exc:
            return self._body_refused(exc)
        except RequestFailedError as exc:
            return error_response(500, str(exc))
        except web.HTTPException:
            raise
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - the server never dies on a request
            events.emit("request_error", error=type(exc).__name__, message=str(exc))
            return error_response(500, f"internal error: {type(exc).__name__}")

    def _body_refused(self, exc: Exception) -> web.Response:
        """413 for a body over max_body; 408, closing the connection, for one too slow."""
        if not isinstance(exc, BodyTimeoutError):
            return error_response(
                413, f"request body exceeds {self.max_body} bytes", code="body_too_large"
            )
        message = f"the request body did not arrive within {self.read_timeout:g} s"
        response = error_response(408, message, code="body_timeout")
        response.force_close()  # the rest of a slow body is not waited for
        return response

    def _authorized(self, request: web.Request) -> bool:
        # aiohttp keeps undecodable header bytes as surrogates: compare the bytes as sent, so a
        # header that is not UTF-8 is a 401 like any other wrong key, never a 500
        given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        return hmac.compare_digest(given, f"Bearer {self.api_key}".encode())

    async def health(self, _request: web.Request) -> web.Response:
        """200 once ready (the server only listens once ready)."""
        return web.Response(text="ok")

    async def metrics_text(self, _request: web.Request) -> web.Response:
        """Prometheus exposition."""
        return web.Response(text=self.metrics.render(), content_type="text/plain")

    async def models(self, _request: web.Request) -> web.Response:
        """The one served model."""
        model = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "sparkengine",
            "max_model_len": self.max_context,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def _read(self, request: web.Request) -> bytes:
        """The whole body: at most max_body bytes (else 413), within read_timeout (else 408)."""
        try:
            async with asyncio.timeout(self.read_timeout):
                return await request.read()
        except TimeoutError:
            raise BodyTimeoutError from None

    async def _body(self, request: web.Request) -> Any:
        raw = await self._read(request)
        return await asyncio.to_thread(_decode, raw)

    async def tokenize(self, request: web.Request) -> web.Response:
        """Token ids of a prompt (or of chat messages through the template)."""
        raw = await self._read(request)
        text = await asyncio.to_thread(self._tokenize, raw)
        return web.Response(text=text, content_type="application/json")

    def _tokenize(self, raw: bytes) -> str:
        """The /tokenize answer as JSON text (in a worker thread: it scales with the body)."""
        body = _decode(raw)
        if not isinstance(body, dict):
            raise RequestError("request body must be a JSON object")
        if "messages" in body:
            tokens = chat_prompt(body)
        elif isinstance(body.get("prompt"), str):
            tokens = tokenizer.encode(body["prompt"])
        else:
            raise RequestError("'prompt' must be a string (or give 'messages')", "prompt")
        if body.get("add_special_tokens") is False and tokens and tokens[0] == tokenizer.BOS:
            tokens = tokens[1:]
        return json.dumps(
            {"tokens": tokens, "count": len(tokens), "max_model_len": self.max_context}
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """POST /v1/completions."""
        return await self._generate(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """POST /v1/chat/completions."""
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        body = await self._body(request)
        parsed = await asyncio.to_thread(
            functools.partial(
                parse,
                body,
                chat=chat,
                model_names=self.names,
                vocab=self.vocab,
                max_context=self.max_context,
                limits=self.limits,
            )
        )
        scheduler = self.engine.scheduler
        need = scheduler.blocks_needed(len(parsed.prompt), parsed.params.max_tokens)
        if need > scheduler.pool.n_blocks:
            raise RequestError(
                f"request needs {need} KV blocks; the engine has {scheduler.pool.n_blocks}",
                "max_tokens",
            )
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        gen = Generation(parsed)
        if parsed.stream:
            return await self._stream(request, rid, gen, chat)
        async with contextlib.aclosing(self._tokens(rid, gen)) as tokens:
            async for _ in tokens:
                pass
        # a structured answer is built from the tokens (up to answer_size's budget): off the loop
        text = await asyncio.to_thread(lambda: json.dumps(self._final(rid, gen, chat)))
        return web.Response(text=text, content_type="application/json")

    async def _tokens(self, rid: str, gen: Generation) -> AsyncGenerator[None]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[TokenOut] = asyncio.Queue()

        def sink(out: TokenOut) -> None:  # called on the engine thread
            loop.call_soon_threadsafe(queue.put_nowait, out)

        seq = Sequence(rid, gen.parsed.prompt, gen.parsed.params, sink)
        self.engine.submit(seq)
        try:
            while gen.finish_reason is None:
                out = await queue.get()
                if out.error is not None:
                    raise RequestFailedError(out.error)
                gen.add(out)
                yield
        finally:
            if not gen.outs or gen.outs[-1].finish_reason is None:
                self.engine.abort(rid)  # stop string, client gone or cancelled

    def _final(self, rid: str, gen: Generation, chat: bool) -> dict[str, Any]:
        text = gen.take_text()
        choice: dict[str, Any] = {"index": 0, "finish_reason": gen.finish_reason}
        want_lp = gen.parsed.params.logprobs is not None
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
            choice["message"].update(self._structured(gen, choice))
            choice["logprobs"] = chat_logprobs(gen.outs) if want_lp else None
        else:
            choice["text"] = text
            choice["logprobs"] = completion_logprobs(gen.outs, 0) if want_lp else None
        if gen.parsed.return_token_ids:
            choice["token_ids"] = [o.token for o in gen.outs]
            choice["prompt_token_ids"] = gen.parsed.prompt
        return {
            "id": rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": gen.usage(),
        }

    @staticmethod
    def _structured(gen: Generation, choice: dict[str, Any]) -> dict[str, Any]:
        """Content or tool calls built from the tokens (nothing for a plain-text request)."""
        structure = gen.parsed.structure
        if structure is None:
            return {}
        tokens, logprobs = [o.token for o in gen.outs], [o.logprob for o in gen.outs]
        rendered = render(structure, tokens, gen.text, logprobs)
        if rendered.tool_calls:
            choice["finish_reason"] = "tool_calls"
        return rendered.message()

    async def _stream(
        self, request: web.Request, rid: str, gen: Generation, chat: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"

        async def send(choices: list[dict[str, Any]], usage: Any = None) -> None:
            chunk = {"id": rid, "object": obj, "created": created, "model": self.model_name}
            chunk["choices"] = choices
            if gen.parsed.include_usage:
                chunk["usage"] = usage
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        if chat:
            first: dict[str, Any] = {"index": 0, "delta": {"role": "assistant", "content": ""}}
            first.update(logprobs=None, finish_reason=None)
            if gen.parsed.return_token_ids:
                first["prompt_token_ids"] = gen.parsed.prompt
            await send([first])
        done = 0
        try:
            async with contextlib.aclosing(self._tokens(rid, gen)) as tokens:
                async for _ in tokens:
                    if gen.parsed.structure is not None:
                        continue  # the structured answer goes out whole at the end
                    outs, done = gen.outs[done:], len(gen.outs)
                    await send([self._delta(gen, outs, chat, first_chunk=done == len(outs))])
        except RequestFailedError as exc:  # headers are sent: the error goes in the stream
            error = {"message": str(exc), "type": "internal_server_error", "code": 500}
            await response.write(f"data: {json.dumps({'error': error})}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        if gen.parsed.structure is not None:
            await send([await asyncio.to_thread(self._structured_delta, gen)])
        if gen.parsed.include_usage:
            await send([], gen.usage())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _structured_delta(self, gen: Generation) -> dict[str, Any]:
        """The one chunk of a streamed structured answer: all of it, as OpenAI's deltas say."""
        choice = self._delta(gen, gen.outs, True, first_chunk=True)
        message = self._structured(gen, choice)
        choice["delta"] = {"content": message["content"]}
        if message["tool_calls"]:
            choice["delta"]["tool_calls"] = [
                {"index": i, **call} for i, call in enumerate(message["tool_calls"])
            ]
        return choice

    def _delta(
        self, gen: Generation, outs: list[TokenOut], chat: bool, *, first_chunk: bool
    ) -> dict[str, Any]:
        offset = gen.sent
        text = gen.take_text()
        want_lp = gen.parsed.params.logprobs is not None
        choice: dict[str, Any] = {"index": 0, "finish_reason": gen.finish_reason}
        if chat:
            choice["delta"] = {"content": text}
            choice["logprobs"] = chat_logprobs(outs) if want_lp else None
        else:
            choice["text"] = text
            choice["logprobs"] = completion_logprobs(outs, offset) if want_lp else None
            if gen.parsed.return_token_ids and first_chunk:
                choice["prompt_token_ids"] = gen.parsed.prompt
        if gen.parsed.return_token_ids:
            choice["token_ids"] = [o.token for o in outs]
        return choice
