"""Read an engine's logs as a boot timeline, using only what its profile says about them.

A profile names, per phase, either a JSON event name (`format: jsonl`, the bundled engine) or a
regex (`format: regex`, vLLM under `docker logs -t`). This module turns log lines into typed
events, and the events of every rank into a `BootTimeline`: per-rank phase times, kernels
prepared and their seconds, the liveness wait, time to ready and compiles after preparation.
It is pure: the boot loop feeds it lines, so the same parsing serves live boots, evidence and
recomputation from a record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flows.spec.engine import Logs

PHASES = ("weights_loaded", "kernels_prepared", "rendezvous", "ready")
PEER_FAILURES = ("collective_failure", "peer_failure")
FAILURES = (*PEER_FAILURES, "fatal")
COMPILE = "compile_after_preparation"
_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?)\s")
_FIGURE = re.compile(r"^-?\d+(?:\.\d+)?$")


class LogEvent(BaseModel):
    """One log line that means something to the pipeline."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    rank: int
    name: str = Field(description="Profile event: a phase, a failure or a compile.")
    ts: datetime | None = Field(description="When the engine says it happened (UTC).")
    figures: dict[str, Any] = Field(default={}, description="Numbers and fields of the event.")
    line: str = Field(description="The raw line, for evidence and messages.")

    @property
    def is_failure(self) -> bool:
        """True for events that end a boot at once."""
        return self.name in FAILURES

    @property
    def blames_peer(self) -> bool:
        """True for failures a rank reports because another rank stopped answering."""
        return self.name in PEER_FAILURES


class RankTimeline(BaseModel):
    """What one rank did during a boot, in seconds since the boot started."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    rank: int
    phases: dict[str, float] = Field(description="Phase name -> seconds since the boot started.")
    kernels: int | None = Field(description="Kernel configurations prepared.")
    compiled: int | None = Field(description="Of which compiled (not loaded from the cache).")
    cached: int | None = Field(description="Of which loaded from the cache.")
    prepare_s: float | None = Field(description="Seconds the preparation took.")
    liveness_wait_s: float | None = Field(description="Seconds spent waiting for the other ranks.")
    compiles_after_preparation: int = Field(description="Compiles logged after preparation.")
    failures: list[str] = Field(default=[], description="Failure lines of this rank.")


class BootTimeline(BaseModel):
    """A whole boot: every rank's timeline, and time to ready measured by the pipeline."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    started_at: datetime
    ready_s: float | None = Field(description="Boot start to a successful readiness probe.")
    ranks: list[RankTimeline]

    @property
    def compiles_after_preparation(self) -> int:
        """Compiles after preparation over all ranks (the gate wants zero)."""
        return sum(rank.compiles_after_preparation for rank in self.ranks)

    @property
    def slowest_prepare_s(self) -> float | None:
        """The slowest rank's preparation, which bounds time to ready from below."""
        values = [rank.prepare_s for rank in self.ranks if rank.prepare_s is not None]
        return max(values) if values else None


class LogReader:
    """Turns one rank's log lines into events according to the engine profile."""

    def __init__(self, logs: Logs, *, node: str, rank: int) -> None:
        self.node = node
        self.rank = rank
        self.format = logs.format
        names = logs.events.model_dump()
        self._by_event = {value: name for name, value in names.items() if value is not None}
        self._patterns = [
            (name, re.compile(value)) for name, value in names.items() if value is not None
        ]

    def read(self, lines: Iterable[str]) -> list[LogEvent]:
        """The events among `lines`, in line order (lines that mean nothing are skipped)."""
        return [event for line in lines for event in self.parse(line)]

    def parse(self, line: str) -> list[LogEvent]:
        """Every event one line raises: none, one, or (regex) one per pattern it matches.

        A line is never first-match-wins: a line that reports weights loaded and a compile
        raises both, so the compile is counted instead of hidden behind the earlier phase.
        """
        text = line.rstrip("\r\n")
        if not text.strip():
            return []
        if self.format == "jsonl":
            event = self._parse_json(text)
            return [] if event is None else [event]
        return self._parse_regex(text)

    def _parse_json(self, text: str) -> LogEvent | None:
        stamp, body = _split_stamp(text)
        try:
            record = json.loads(body)
        except (ValueError, RecursionError):  # a line nested thousands deep is no event either
            return None
        if not isinstance(record, dict):
            return None
        name = self._by_event.get(str(record.get("event")))
        if name is None:
            return None
        ts = _parse_ts(record.get("ts")) or stamp
        figures = {k: v for k, v in record.items() if k not in ("ts", "event")}
        return LogEvent(
            node=self.node, rank=self.rank, name=name, ts=ts, figures=figures, line=text
        )

    def _parse_regex(self, text: str) -> list[LogEvent]:
        stamp, body = _split_stamp(text)
        matches = ((name, pattern.search(body)) for name, pattern in self._patterns)
        return [
            LogEvent(node=self.node, rank=self.rank, name=name, ts=stamp, line=text,
                     figures={k: _figure(v) for k, v in m.groupdict().items() if v is not None})
            for name, m in matches
            if m is not None
        ]  # fmt: skip


def build_timeline(
    started_at: datetime,
    events: Mapping[tuple[str, int], list[LogEvent]],
    ready_at: datetime | None,
) -> BootTimeline:
    """Assemble the boot timeline from each (node, rank)'s events."""
    ranks = [
        _rank_timeline(node, rank, started_at, rank_events)
        for (node, rank), rank_events in sorted(events.items(), key=lambda item: item[0][1])
    ]
    ready_s = None if ready_at is None else _seconds(started_at, ready_at)
    return BootTimeline(started_at=started_at, ready_s=ready_s, ranks=ranks)


def _rank_timeline(
    node: str, rank: int, started_at: datetime, events: list[LogEvent]
) -> RankTimeline:
    phases: dict[str, float] = {}
    for event in events:
        if event.name in PHASES and event.name not in phases and event.ts is not None:
            phases[event.name] = _seconds(started_at, event.ts)
    prepared = next((e.figures for e in events if e.name == "kernels_prepared"), {})
    met = next((e.figures for e in events if e.name == "rendezvous"), {})
    return RankTimeline(
        node=node,
        rank=rank,
        phases=phases,
        kernels=_int(prepared.get("kernels")),
        compiled=_int(prepared.get("compiled")),
        cached=_int(prepared.get("cached")),
        prepare_s=_float(prepared.get("seconds")),
        liveness_wait_s=_float(met.get("seconds")),
        compiles_after_preparation=sum(1 for e in events if e.name == COMPILE),
        failures=[e.line for e in events if e.is_failure],
    )


def _split_stamp(text: str) -> tuple[datetime | None, str]:
    """Separate a leading RFC 3339 stamp (as `docker logs -t` writes) from the line."""
    match = _RFC3339.match(text)
    if not match:
        return None, text
    return _parse_ts(match.group(1)), text[match.end() :]


def _parse_ts(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    text = value.strip().replace("Z", "+00:00")
    # Docker writes nanoseconds; Python keeps microseconds.
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _seconds(start: datetime, end: datetime) -> float:
    return round((end - start).total_seconds(), 3)


def _figure(text: str) -> Any:
    if _FIGURE.match(text):
        return float(text) if "." in text else int(text)
    return text


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None
