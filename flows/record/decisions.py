"""A person's decision on each record, from the promotions log: promoted, rejected or awaiting.

A record that passed every gate waits for a person (`approve`/`reject`, or `promote` later);
the log (experiments/promotions.jsonl, written by the promotion commands) says what they
decided. A promotion names its record; a rejection names only the release, so it answers that
release's records opened before it. Pure: records and log entries in, words out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import PurePath
from typing import Any, Protocol, TypeVar

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


D = TypeVar("D", bound=Decided)


def decision_of(record: Record, log: Sequence[Decided]) -> str:
    """`promoted`, `rejected`, `awaiting` (passed, or inconclusive, and nobody decided yet) or a
    dash (failed, nothing to decide); the newest deciding line about the record wins."""
    entry = deciding_entry(record, log)
    if entry is not None:
        return entry.action
    return AWAITING if verdict_passes(record.verdict) or needs_acceptance(record) else DASH


def deciding_entry(record: Record, log: Sequence[D]) -> D | None:
    """The newest line of the log that decided about `record` (None: nobody decided yet)."""
    answer = None
    for entry in log:
        if entry.action not in DECIDING or entry.release != record.release_name:
            continue
        if entry.record is not None and PurePath(entry.record).name != record.name:
            continue
        if entry.record is None and entry.at < record.created_at:
            continue  # a rejection of an earlier qualification of the same release
        answer = entry
    return answer


def needs_acceptance(record: Record) -> bool:
    """Whether no gate of the record failed but some could not decide (inconclusive): it is
    promotable only with a person's reason for accepting that (`--accept-inconclusive`)."""
    outcomes = {stage.outcome for stage in record.stages.values()}
    return "inconclusive" in outcomes and "failed" not in outcomes


def acceptance_problems(record: Record, promotions: Sequence[Mapping[str, Any]]) -> list[str]:
    """Promotions of `record` that do not say who accepted its inconclusive gates and why.

    `promotions` are the promotions log's lines as read (JSON objects); only `promoted` lines
    naming this record count. A record that needed no acceptance needs nothing here.
    """
    if not needs_acceptance(record):
        return []
    problems = []
    for line in promotions:
        named = line.get("record")
        if line.get("action") != "promoted" or not isinstance(named, str):
            continue
        if PurePath(named).name != record.name:
            continue
        reason = line.get("accepted_inconclusive")
        if not isinstance(reason, str) or not reason.strip() or not str(line.get("by", "")).strip():
            problems.append(
                f"{record.name}: promoted at {line.get('at')} by {line.get('by')!r} although its "
                "benchmark was inconclusive, with no reason for accepting it "
                "(--accept-inconclusive)"
            )
    return problems
