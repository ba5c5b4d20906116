"""A webhook receiver on loopback: a real HTTP server that keeps every JSON body posted to it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from .net import free_port


class Receiver:
    """A webhook receiver on loopback that keeps every JSON body it is sent."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                bodies.append(json.loads(self.rfile.read(length) or b"{}"))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                """Quiet."""

        self.server = HTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def posted(self, release: str, state: str, says: str = "") -> dict[str, Any] | None:
        """The first body posted for `release` entering `state` whose message starts with
        `says`, or None."""
        return next(
            (
                b for b in self.bodies
                if b.get("release") == release and b.get("state") == state
                and str(b.get("message", "")).startswith(says)
            ),
            None,
        )  # fmt: skip
