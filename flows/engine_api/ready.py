"""The one readiness probe: does the engine (or a server) answer its health URL with 2xx.

Boots poll it until the head is ready, promotion checks a deployed head with it and the
embedded Prefect server is waited for with it.
"""

from __future__ import annotations

from flows.net import http_ok

PROBE_TIMEOUT_S = 3.0


def probe_ready(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True when the readiness URL answers 2xx within `timeout_s`."""
    return http_ok(url, timeout_s)
