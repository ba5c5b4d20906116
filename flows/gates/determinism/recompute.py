"""The determinism stage of a record checked again: against the previous release, and judged anew.

The gate keeps every scenario's raw responses under scenarios/<name>.json; judging them again
with the gate's own `judge` (and the previous record's hashes it compared against) must give the
same scenarios, the same comparison with the previous release, the same hashes and outcome; and
the identical responses it counts against the previous release must follow from the hashes.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from flows.gates.determinism.kept import compared_hashes, hash_matches, record_hashes
from flows.gates.determinism.rules import judge
from flows.gates.determinism.summary import DeterminismSummary, ScenarioRow
from flows.gates.story import Earlier, RecordView, StageView
from flows.gates.traffic import Answered
from flows.spec.release import Release

SAMPLED_FILE = "sampled-streams.json"
DETERMINISM_KEYS = ("prompts", "scenarios", "against_previous", "hashes", "chat_hashes")


def determinism_recomputed(record: RecordView, stage: StageView, previous: Earlier) -> list[str]:
    """Every difference between the stage's summary and its raw responses and previous hashes."""
    found, theirs, problems = compared_hashes(record, stage, previous)
    problems += _recounted(stage, found, theirs)
    if stage.outcome == "skipped":
        return problems
    if found is None and theirs is None:
        found = previous()
        theirs = record_hashes(found) if found is not None else None
    return problems + judged_again(record, stage, found, theirs)


def _recounted(
    stage: StageView, found: RecordView | None, theirs: dict[str, Any] | None
) -> list[str]:
    """Identical responses against the previous release, counted again from the hashes."""
    summary = stage.summary
    if not isinstance(summary, DeterminismSummary) or theirs is None:
        return []
    against = summary.against_previous
    if against is None:
        return []
    identical, total = hash_matches(summary.hash_table(), theirs)
    if (identical, total) == (against.identical, against.total):
        return []
    source = found.name if found is not None else "the copy kept in this record"
    said = f"{against.identical}/{against.total}"
    problem = (
        f"determinism: against previous says {said} identical, "
        f"the hashes of {source} give {identical}/{total}"
    )
    return [problem]


def judged_again(
    record: RecordView,
    stage: StageView,
    previous: RecordView | None,
    previous_hashes: dict[str, Any] | None,
) -> list[str]:
    """Differences between the summary and the gate's own judgement of the raw responses."""
    folder, kept = record.folder, stage.summary
    if folder is None or not (folder / stage.stage / "scenarios" / "alone.json").is_file():
        return []
    scenarios = folder / stage.stage / "scenarios"
    try:
        runs = {
            file.stem: [Answered(**item) for item in json.loads(file.read_text())]
            for file in sorted(scenarios.glob("*.json"))
            if file.name != SAMPLED_FILE
        }
        release = Release.model_validate(record.release)
        summary, outcome, _reason = judge(
            runs,
            release.gates.determinism,
            release.outputs,
            _previous_name(record, previous),
            previous_hashes,
        )
    except (ValidationError, ValueError, TypeError, KeyError) as error:
        return [f"determinism: the raw responses cannot be judged again: {error}"]
    problems = [
        f"determinism: {key} differs from the one the raw responses give"
        for key in DETERMINISM_KEYS
        if isinstance(kept, DeterminismSummary)
        and _normal(getattr(summary, key)) != _normal(getattr(kept, key))
    ]
    if outcome.value != stage.outcome:
        problems.append(
            f"determinism: outcome {stage.outcome}, the raw responses give {outcome.value}"
        )
    return problems


def _previous_name(record: RecordView, previous: RecordView | None) -> str | None:
    """The previous release's name as the gate saw it (its record's spec; else the record's)."""
    if previous is not None:
        return str(previous.release["name"])
    return record.previous


def _normal(value: Any) -> Any:
    """Scenarios compared by name: the files come back sorted, not in the order they ran."""
    if isinstance(value, list) and all(isinstance(item, ScenarioRow) for item in value):
        return sorted(value, key=lambda item: item.name)
    return value
