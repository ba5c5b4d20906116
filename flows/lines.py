"""The one shape of a progress line sink: long work says what it does, one line at a time.

Every function that reports progress takes a `say: LineSink`; callers that want silence pass
`silent`. The terminal board, the Prefect run log and tests are all just sinks.
"""

from __future__ import annotations

from collections.abc import Callable

LineSink = Callable[[str], None]
"""Receives one human-readable progress line (no trailing newline)."""


def silent(line: str) -> None:
    """A sink that drops every line."""
    del line
