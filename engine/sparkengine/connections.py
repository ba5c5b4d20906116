"""Open connections are bounded in number and in how long they may take to send a request.

Every connection can hold a request body of up to --max-body-bytes while it arrives, so without
a cap 1,477 clients each trickling 2 MB exhausted the memory of the engine. Here:

- at most `max_connections` are open at once; one more is answered 503 (OpenAI's error shape)
  and closed, so memory held by partial requests is at most max_connections x max_body_bytes;
- a new connection must send a whole request head within `read_timeout` seconds, else it is
  closed (the Api bounds the body's time the same way, with a 408), and an idle keep-alive
  connection is closed after the same time, so slow or silent clients cannot keep the slots.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
DEFAULT_MAX_CONNECTIONS = 256
DEFAULT_READ_TIMEOUT = 30.0
LINGER = 1.0


def _refusal(max_connections: int) -> bytes:
    error = {
        "message": f"the engine has {max_connections} open connections, its limit; retry later",
        "type": "internal_server_error",
        "param": None,
        "code": "too_many_connections",
    }
    body = json.dumps({"error": error}).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    )
    return head.encode() + body


class _Refused(asyncio.Protocol):
    """A connection over the cap: a 503, then what the client still sends is read and dropped
    for at most LINGER seconds (closing with unread data would reset the connection and could
    lose the 503), then closed."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(self.answer)
        transport.write_eof()
        asyncio.get_running_loop().call_later(LINGER, transport.abort)

    def data_received(self, data: bytes) -> None:
        """Dropped: the request is refused whatever it says."""

    def eof_received(self) -> bool:
        return False  # the client has finished: close


@dataclass
class Gate:
    """The protocol factory of the HTTP listener, in front of aiohttp's, and the middleware
    that marks a connection as having sent its request head."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    read_timeout: float = DEFAULT_READ_TIMEOUT
    refused: int = 0
    _accepted_this_turn: int = 0
    _waiting: set[RequestHandler] = field(default_factory=set)

    def factory(self, server: web.Server) -> Callable[[], asyncio.Protocol]:
        """What `loop.create_server` calls for each accepted connection.

        aiohttp counts a connection once its `connection_made` runs, a loop turn after it is
        accepted; connections accepted in the current turn are counted here until then.
        """
        loop = asyncio.get_running_loop()
        answer = _refusal(self.max_connections)

        def make() -> asyncio.Protocol:
            if not self._accepted_this_turn:
                loop.call_soon(self._new_turn)
            if len(server.connections) + self._accepted_this_turn >= self.max_connections:
                self.refused += 1
                return _Refused(answer)
            self._accepted_this_turn += 1
            handler = server()
            self._waiting.add(handler)
            loop.call_later(self.read_timeout, self._expire, handler)
            return handler

        return make

    def _new_turn(self) -> None:
        self._accepted_this_turn = 0

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """A request head arrived on its connection: it is no longer a silent one."""
        self._waiting.discard(request.protocol)
        return await handler(request)

    def _expire(self, handler: RequestHandler) -> None:
        if handler in self._waiting:
            self._waiting.discard(handler)
            handler.force_close()
