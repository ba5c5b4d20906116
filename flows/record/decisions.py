"""A person's decision on each record, from the promotions log: promoted, rejected or awaiting.

A record that passed every gate waits for a person (`approve`/`reject`, or `promote` later);
the log (experiments/promotions.jsonl, written by the promotion commands) says what they
decided. A promotion names its record; a rejection names only the release, so it answers that
release's records opened before it. Pure: records and log entries in, words out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import PurePath
from typing import Protocol

from flows.gates.markdown import DASH
from flows.record.model import Record, verdict_passes

DECIDING = ("promoted", "rejected")
AWAITING = "awaiting"


class Decided(Protocol):
    """One line of the promotions log, as far as a decision goes."""

    @property
    def at(self) -> datetime:
        """When."""
        ...

    @property
    def action(self) -> str:
        """promoted, rejected, rolled-back, ..."""
        ...

    @property
    def release(self) -> str:
        """The release decided on."""
        ...

    @property
    def record(self) -> str | None:
        """The record it rests on (promotions name one)."""
        ...


def decision_of(record: Record, log: Sequence[Decided]) -> str:
    """`promoted`, `rejected`, `awaiting` (passed, nobody decided yet) or a dash (not
    qualified, nothing to decide); the newest deciding line about the record wins."""
    answer = None
    for entry in log:
        if entry.action not in DECIDING or entry.release != record.release_name:
            continue
        if entry.record is not None and PurePath(entry.record).name != record.name:
            continue
        if entry.record is None and entry.at < record.created_at:
            continue  # a rejection of an earlier qualification of the same release
        answer = entry.action
    if answer is not None:
        return answer
    return AWAITING if verdict_passes(record.verdict) else DASH
