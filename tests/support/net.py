"""Loopback ports for engines and servers that tests start.

A port the OS hands out for `bind(0)` comes from its ephemeral range, the same range every
outgoing connection draws its local port from; between the probe and the server's own bind, a
client socket of any test can take it (CI of 2026-12-05: a rank failed to boot with "address
already in use" on such a port). Below that range only explicit binds compete, so ports are
picked there, at random, checked free, and never handed out twice by one test process.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

from flows import net

LOWEST = 20000
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_given: set[int] = set()


def ephemeral_start() -> int:
    try:
        return int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port below the ephemeral range that was free a moment ago."""
    highest = ephemeral_start() - 1
    if highest > LOWEST:
        for _ in range(500):
            port = random.randint(LOWEST, highest)
            if port not in _given and _bindable(port):
                _given.add(port)
                return port
    return net.free_port()  # no room below the range: let the OS pick
