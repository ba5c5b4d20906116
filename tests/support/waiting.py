"""One poll loop for tests: wait for a condition, fail with what was awaited and for how long."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeoutError(AssertionError):
    """A condition a test waited for did not come true in time (a test failure, not an error)."""


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float,
    what: str,
    *,
    interval_s: float = 0.5,
    detail: Callable[[], str] | None = None,
) -> T:
    """Poll `predicate` until it returns something truthy, and return that.

    The predicate may raise (an assertion that a process is still alive, say) to end the wait
    at once. On timeout the failure reads "timed out after N s waiting for WHAT", followed by
    `detail()` (logs, server tails) when given.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            message = f"timed out after {timeout_s:g} s waiting for {what}"
            if detail is not None:
                message = f"{message}:\n{detail()}"
            raise WaitTimeoutError(message)
        time.sleep(interval_s)
