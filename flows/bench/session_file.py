"""The recorded-session file: one JSON object a line, a header first, then one turn per exchange.

JSON Lines so the recording proxy can append each exchange the moment it completes (flushed and
synced): a Ctrl-C, a crash or a full disk never costs a finished turn, and a half-written last
line is reported as such rather than silently dropped. Secrets are redacted before a line is
written (`flows.secrets`), so a session can be shared and committed like a record.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from flows.errors import SpecError

SESSION_SCHEMA: Literal[1] = 1
_FROZEN = ConfigDict(frozen=True, extra="forbid")
M = TypeVar("M", bound=BaseModel)
MAX_SESSION_BYTES = 512 << 20
"""Upper bound on a session read into memory (a long agent session is tens of MB)."""


class SessionHeader(BaseModel):
    """Where and when a session was recorded."""

    model_config = _FROZEN

    kind: Literal["session"] = "session"
    schema_version: Literal[1] = SESSION_SCHEMA
    recorded_utc: str = Field(description="start of the recording, UTC ISO-8601")
    upstream: str = Field(description="the endpoint the proxy forwarded to (password redacted)")
    note: str = Field(default="", description="what was recorded, in the recorder's words")


class Turn(BaseModel):
    """One request of the session as the client sent it, and what came back."""

    model_config = _FROZEN

    kind: Literal["turn"] = "turn"
    index: int = Field(ge=0, description="position in the session, from 0")
    path: Literal["/v1/completions", "/v1/chat/completions"] = Field(description="endpoint path")
    body: dict[str, JsonValue] = Field(description="the request body as sent, secrets redacted")
    headers: dict[str, str] = Field(
        default_factory=dict, description="request headers, secrets redacted"
    )
    sent_s: float = Field(ge=0, description="send time, seconds after the recording started")
    gap_s: float = Field(
        ge=0, description="idle time before it: since the previous response ended (0 for the first)"
    )
    status: int = Field(description="HTTP status the upstream answered")
    ttft_s: float | None = Field(default=None, description="first response chunk, as recorded")
    duration_s: float = Field(ge=0, description="send to end of the response, as recorded")
    usage: dict[str, JsonValue] = Field(
        default_factory=dict, description="the response's usage object, when it carried one"
    )


class Session(BaseModel):
    """A whole recorded session: its header and its turns in order."""

    model_config = _FROZEN

    header: SessionHeader
    turns: list[Turn]


def header_line(header: SessionHeader) -> str:
    """The first line of a session file."""
    return header.model_dump_json() + "\n"


def turn_line(turn: Turn) -> str:
    """One turn's line."""
    return turn.model_dump_json() + "\n"


def append_line(stream: IO[str], line: str) -> None:
    """Append one line and push it to the disk before returning: a finished turn is kept."""
    stream.write(line)
    stream.flush()
    os.fsync(stream.fileno())


def _bad(path: Path, line: int, key: str, message: str, expected: str | None = None) -> SpecError:
    return SpecError(message, file=path, line=line, key=key, expected=expected)


def parse_session(path: Path, text: str) -> Session:
    """A session from the text of its file.

    Raises:
        SpecError: naming the file, the line and the key of the first problem (exit 2).
    """
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise _bad(path, 1, "kind", "empty file", "a session header line")
    records: list[tuple[int, dict[str, JsonValue]]] = []
    for number, line in lines:
        try:
            data = json.loads(line)
        except ValueError as error:
            raise _bad(path, number, "(line)", f"not JSON: {error}", "one JSON object") from None
        if not isinstance(data, dict):
            raise _bad(path, number, "(line)", "not a JSON object", "one JSON object")
        records.append((number, data))
    (first_line, first), rest = records[0], records[1:]
    header = _validate(path, first_line, SessionHeader, first)
    turns = [_validate(path, number, Turn, data) for number, data in rest]
    for position, (turn, (number, _)) in enumerate(zip(turns, rest, strict=True)):
        if turn.index != position:
            raise _bad(
                path, number, "index", f"turn index {turn.index} out of order", str(position)
            )
    return Session(header=header, turns=turns)


def _validate(path: Path, line: int, model: type[M], data: dict[str, JsonValue]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "(line)"
        expected = "the header line" if model is SessionHeader else "a turn line"
        raise _bad(path, line, key, first["msg"], f"{expected} of a recorded session") from None


def read_session(path: Path) -> Session:
    """Read and validate a session file.

    Raises:
        SpecError: when it is missing, unreadable, too large or invalid (exit 2).
    """
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_SESSION_BYTES + 1)
    except OSError as error:
        raise SpecError(f"cannot read: {error.strerror}", file=path) from None
    if len(raw) > MAX_SESSION_BYTES:
        raise SpecError(f"larger than {MAX_SESSION_BYTES} bytes", file=path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpecError(f"not UTF-8 text (byte {error.start})", file=path) from None
    return parse_session(path, text)
