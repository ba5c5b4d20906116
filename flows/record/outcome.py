"""What a record's gates found, in a word each, and the lines a record leads with (pure).

`records`, `records --brief`, `show` and the README name what a gate found beyond passed or
failed, as its story tells it (the benchmark's faster, level, slower, inconclusive; lost when
the candidate lost measurements), so a reader never has to decode "failed at benchmark: ..."
to learn what the benchmark found. No gate is named here: the registry's stories say it.
"""

from __future__ import annotations

from flows.gates.markdown import DASH
from flows.gates.registry import REGISTRY
from flows.record import tables
from flows.record.decisions import needs_acceptance
from flows.record.model import Record, StageEntry


def found(record: Record, stage: str) -> str:
    """What a stage found in one word: its story's word, else `skipped` or `failed` (a gate that
    stopped before it could tell), else a dash when it did not run or tells nothing more."""
    entry = record.stages.get(stage)
    if entry is None:
        return DASH
    word = _told(stage, entry) if entry.outcome != "skipped" else ""
    if word:
        return word
    return entry.outcome if entry.outcome in ("skipped", "failed") else DASH


def findings(record: Record) -> dict[str, str]:
    """The gates whose stories found something beyond their outcome, by name, in flow order."""
    told = {gate.name: _told(gate.name, record.stages.get(gate.name)) for gate in REGISTRY}
    return {name: word for name, word in told.items() if word}


def _told(stage: str, entry: StageEntry | None) -> str:
    story = tables.story_of(stage)
    if story is None or entry is None or entry.summary is None or entry.outcome == "skipped":
        return ""
    return story.found(entry.summary)


def lead(record: Record) -> list[str]:
    """What a record's README says first: the verdict (the decision), what its gates found,
    what a person must do about an inconclusive one, and the lines the stories lead with (the
    benchmark's largest gated changes with their 95 % intervals)."""
    verdict = record.verdict or "in progress"
    said = " ".join(
        f"{name.replace('_', ' ').capitalize()}: **{word}**."
        for name, word in findings(record).items()
    )
    lines = [f"**Verdict: {verdict}.**" + (f" {said}" if said else "")]
    if needs_acceptance(record):
        lines[0] += (
            " Not promoted by itself: a person decides, and approving needs a reason "
            f'(`sparkgate approve {record.release_name} --accept-inconclusive "REASON"`, or '
            '`sparkgate promote ... --accept-inconclusive "REASON"` later).'
        )
    for gate in REGISTRY:
        entry = record.stages.get(gate.name)
        if entry is not None and entry.summary is not None:
            shown = gate.story.leading(entry.summary)
            lines += ["", *shown] if shown else []
    return lines
