"""Replay captured boot logs through an engine profile's markers, as the cold-boots gate would.

The gate trusts regexes for phases, compiles and peer failures. Before trusting them on a real
cluster, an operator captures one boot (`docker logs -t` of every rank) and replays it here: the
timeline, the kernel counts, the compiles counted against the release and the failures come out
exactly as a boot would record them, so a pattern that matches the wrong line shows up before it
fails (or passes) a release. Pure: lines in, a report out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict

from flows.cluster.boot.timeline import COMPILE, BootTimeline, LogEvent, LogReader, build_timeline
from flows.spec.engine import EngineProfile

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class RankLog(BaseModel):
    """One rank's captured log: the node it ran on, its rank and its lines."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    rank: int
    lines: list[str]


class Replay(BaseModel):
    """What the gate would record of that boot, and every line a marker matched."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: str
    timeline: BootTimeline
    events: list[LogEvent]
    stamped: bool

    @property
    def late_compiles(self) -> list[LogEvent]:
        """The compile lines counted against the release (after preparation)."""
        return [event for event in self.events if event.name == COMPILE]

    @property
    def verdict(self) -> str:
        """What the cold-boots gate would say of this boot's logs."""
        failures = [event for event in self.events if event.is_failure]
        if failures:
            return f"fails: {failures[0].name} on {failures[0].node} ({len(failures)} lines)"
        late = len(self.late_compiles)
        if late:
            return f"fails: {late} compiles after preparation"
        return "passes: no failure marker, nothing compiled after preparation"


def replay(profile: EngineProfile, logs: Sequence[RankLog]) -> Replay:
    """The boot as the gate reads it; time zero is the first stamped line of any rank."""
    events = {
        (log.node, log.rank): LogReader(profile.logs, node=log.node, rank=log.rank).read(log.lines)
        for log in logs
    }
    stamps = [e.ts for found in events.values() for e in found if e.ts is not None]
    started = min(stamps) if stamps else EPOCH
    ordered = sorted(
        (event for found in events.values() for event in found),
        key=lambda event: (event.ts or EPOCH, event.rank),
    )
    return Replay(
        profile=profile.name,
        timeline=build_timeline(started, events, ready_at=None),
        events=ordered,
        stamped=bool(stamps),
    )
