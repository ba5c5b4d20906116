"""What a record keeps of the determinism gate for later: its hashes, and the previous ones it used.

A later release compares its outputs with a record's hashes (`record_hashes`); a record keeps a
copy of the hashes it was compared with (previous-hashes.json), so it verifies on its own, and
when the previous record is beside it both must agree (`compared_hashes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flows.gates.determinism.rules import NAME, PREVIOUS_FILE, hashes_digest
from flows.gates.determinism.summary import DeterminismSummary
from flows.gates.story import Earlier, RecordView, StageView

HASHES_FILE = "hashes.json"


def record_hashes(record: RecordView) -> dict[str, Any] | None:
    """The per-prompt determinism hashes of a record, for the next release's comparison.

    The stage's raw hashes.json is preferred (its entries also carry the token ids a `changed`
    release needs for top-token agreement) when it is still as saved; else the summary's hashes.
    """
    stage = record.stages.get(NAME)
    if stage is None:
        return None
    raw = record.saved_json(f"{NAME}/{HASHES_FILE}")
    if isinstance(raw, dict) and raw:
        return raw
    summary = stage.summary
    if isinstance(summary, DeterminismSummary) and summary.hashes:
        return summary.hash_table()
    return None


def hash_matches(hashes: Mapping[str, Any], previous_hashes: Mapping[str, Any]) -> tuple[int, int]:
    """(identical, total) over this record's prompts, as the determinism gate counts them.

    A prompt is identical when the previous record has it with the same token and logprob
    hashes; a prompt the previous record lacks counts as differing.
    """
    identical = 0
    for prompt, digest in hashes.items():
        before = previous_hashes.get(prompt)
        if (
            isinstance(before, Mapping)
            and isinstance(digest, Mapping)
            and before.get("tokens") == digest.get("tokens")
            and before.get("logprobs") == digest.get("logprobs")
        ):
            identical += 1
    return identical, len(hashes)


def compared_hashes(
    record: RecordView, stage: StageView, previous: Earlier
) -> tuple[RecordView | None, dict[str, Any] | None, list[str]]:
    """The hashes the determinism gate compared against, and problems finding them.

    The record keeps a copy (determinism/previous-hashes.json), so a record copied on its own
    still verifies; when the previous record is beside it too, both must agree.
    """
    summary = stage.summary
    against = summary.against_previous if isinstance(summary, DeterminismSummary) else None
    if against is None or against.mode not in ("unchanged", "changed"):
        return None, None, []
    found = previous()
    copy = record.saved_json(f"{stage.stage}/{PREVIOUS_FILE}")
    kept = copy.get("hashes") if isinstance(copy, dict) else None
    if found is None and kept is None:
        missing = (
            f"determinism: the previous release's record ({record.previous}) is not beside "
            "this record and the record keeps no copy of the hashes it compared against, so "
            "against_previous cannot be checked: copy that record into the same folder"
        )
        return None, None, [missing]
    if found is None:
        return None, kept, []
    theirs = record_hashes(found)
    if kept is None:
        return found, theirs, []
    if theirs is None or hashes_digest(theirs) != copy.get("sha256"):
        changed = (
            f"determinism: the previous record {found.name} has changed since this record "
            "was compared against it (its hashes no longer match the copy kept here, "
            f"{str(copy.get('sha256'))[:12]})"
        )
        return found, kept, [changed]
    return found, kept, []
