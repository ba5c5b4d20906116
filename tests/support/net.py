"""Loopback ports for engines and servers that tests start."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
