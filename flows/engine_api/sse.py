"""The one parser of the engine's server-sent events (the OpenAI streaming format).

A stream is a run of messages separated by a blank line; each `data:` line of a message holds one
JSON event, and `data: [DONE]` ends the stream. Bytes arrive in arbitrary pieces, so `SseDecoder`
keeps the unfinished tail between `feed` calls. The load generator and the gates both read
their streams through it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

Events = list[dict[str, Any]] | None
"""The JSON events of one message; None for the `[DONE]` message."""


def message_events(block: bytes) -> Events:
    """The JSON events of one SSE message; None for [DONE]. Comments and blanks are skipped.

    Raises:
        ValueError: if a data line is not JSON (orjson's error is a ValueError).
    """
    if block.startswith(b"data: {") and b"\n" not in block:  # the usual one-line message
        return [orjson.loads(block[6:])]
    out = []
    for line in block.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return None
        out.append(orjson.loads(data))
    return out


class SseDecoder:
    """Turns a byte stream, fed in pieces, into whole messages' events."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> Iterator[Events]:
        """The events of every message completed by `data`, in order, parsed as they are read."""
        self._buffer += data.replace(b"\r\n", b"\n")
        *messages, self._buffer = self._buffer.split(b"\n\n")
        for message in messages:
            yield message_events(message)

    def finish(self) -> list[Events]:
        """The events of a last message the stream did not end with a blank line."""
        tail, self._buffer = self._buffer.strip(), b""
        return [message_events(tail)] if tail else []
