"""Scripted HTTP servers for tests: an aiohttp app on a free loopback port, in its own thread.

Its own thread and loop, so blocking test code and forked client processes can reach it. On exit
the site is cleaned up and the loop closed, so no socket, transport or loop is left for the
garbage collector to warn about.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web


@contextmanager
def serving(app: web.Application) -> Iterator[str]:
    """Serve `app` until the block ends; its base URL (`http://127.0.0.1:PORT`)."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.SockSite(runner, sock).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.run_until_complete(runner.cleanup())
        loop.close()
        sock.close()
