"""Two network helpers every part needs: a free loopback port and "does this URL answer 2xx"."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def http_ok(url: str, timeout_s: float) -> bool:
    """True when a GET of `url` answers 2xx within `timeout_s`; any failure is False."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
            return 200 <= int(response.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False
