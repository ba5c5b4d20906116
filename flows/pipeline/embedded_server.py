"""The embedded Prefect server's process: the whole app behind the secret, adverts gone with it.

Run by `flows.pipeline.embedded` as `python embedded_server.py PORT ADVERTS_DIR`, with the
secret in PREFECT_SERVER_API_AUTH_STRING. Two things Prefect's `create_app` factory leaves open
are closed here:

- Prefect checks the secret on its API only; the root app's `/docs` and `/openapi.json` (and
  anything mounted later) answer anyone. Every request but `GET /api/health` and `/api/ready`
  now needs the secret, whatever its path.
- The server's advert (`<pid>.url`) and secret (`<pid>.auth`) were removed by the run that
  started it, so a run killed by a signal left them behind. The server removes its own when it
  stops; it is signalled when its run dies (PR_SET_PDEATHSIG), so they go with a killed run.

This file is run by path and imports only the standard library, Prefect and uvicorn, so it works
whatever the current directory is.
"""

from __future__ import annotations

import base64
import hmac
import os
import signal
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from types import FrameType
from typing import Any

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN_PATHS = frozenset({"/api/health", "/api/ready"})
SECRET_ENV = "PREFECT_SERVER_API_AUTH_STRING"  # noqa: S105 - a variable name


def authorized(headers: list[tuple[bytes, bytes]], secret: str) -> bool:
    """Whether a request's Authorization header carries `secret` as HTTP basic credentials."""
    given = next((value for name, value in headers if name.lower() == b"authorization"), b"")
    scheme, _, credentials = given.partition(b" ")
    if scheme.lower() != b"basic":
        return False
    try:
        decoded = base64.b64decode(credentials.strip(), validate=True)
    except ValueError:
        return False
    return hmac.compare_digest(decoded, secret.encode())


def guarded(app: App, secret: str) -> App:
    """`app` behind the secret: 401 for every HTTP or websocket request without it but probes."""

    async def wall(scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or _open(scope):
            await app(scope, receive, send)
            return
        if authorized(list(scope.get("headers", [])), secret):
            await app(scope, receive, send)
            return
        if kind == "websocket":
            await send({"type": "websocket.close", "code": 4401})
            return
        body = b'{"exception_message":"Unauthorized"}'
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        ]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    return wall


def _open(scope: Scope) -> bool:
    return scope["type"] == "http" and scope.get("method") == "GET" and scope["path"] in OPEN_PATHS


def serve(port: int, adverts: Path) -> None:
    """Serve until signalled, then remove this server's advert and secret."""
    import uvicorn  # noqa: PLC0415
    from prefect.server.api.server import create_app  # noqa: PLC0415

    secret = os.environ[SECRET_ENV]
    mine = [adverts / f"{os.getpid()}.url", adverts / f"{os.getpid()}.auth"]
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again under the handler
    # it found: the default one would end the process before `finally` runs.
    signal.signal(signal.SIGTERM, _exit)
    try:
        app = guarded(create_app(), secret)
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", lifespan="on")
    finally:
        for file in mine:
            file.unlink(missing_ok=True)


def _exit(signum: int, frame: FrameType | None) -> None:
    del frame
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    serve(int(sys.argv[1]), Path(sys.argv[2]))
