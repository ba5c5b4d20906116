"""The pure rules of promotion: when a record may not be promoted, how a pointer moves, which
file holds it, and what the deploy's spot check compares.

Kept apart from files and Prefect so each rule is read and tested on its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flows.errors import PromotionError, SpecError
from flows.gates.prompts import LONG_ID, Prompt
from flows.gates.registry import GATES
from flows.promotion.models import POINTER_DIR, Pointer, PromotedEntry
from flows.record.decisions import needs_acceptance
from flows.record.model import Record, verdict_passes
from flows.spec.cluster import NAME as CLUSTER_NAME
from flows.spec.release import Release

ACCEPT_FLAG = "--accept-inconclusive"


def refusal_reasons(
    record: Record | None, release: Release, digest: str, accept_inconclusive: str = ""
) -> list[str]:
    """Why `release` may not be promoted with build `digest`; empty when every gate passed.

    A gate counts when it passed, or when it was skipped because this release disables it. A
    gate that ran but could not decide (inconclusive) counts only with `accept_inconclusive`, a
    person's reason for accepting it: never promoted silently.
    """
    if record is None:
        return [f"{release.name}: no published record; qualify it first"]
    if record.release_name != release.name:
        return [f"record {record.name} qualified {record.release_name}, not {release.name}"]
    problems: list[str] = []
    if record.build_digest != digest:
        problems.append(
            f"record {record.name} qualified build {record.build_digest[:12]}, but the build "
            f"that would be deployed now is {digest[:12]}; qualify again"
        )
    for gate in GATES:
        stage = record.stages.get(gate)
        if stage is None:
            problems.append(f"gate {gate} missing from record {record.name}")
        elif stage.outcome == "failed":
            problems.append(f"gate {gate} failed in record {record.name}: {stage.reason}")
        elif stage.outcome == "inconclusive":
            if not accept_inconclusive.strip():
                problems.append(unaccepted(gate, record.name, stage.reason))
        elif stage.outcome != "passed" and getattr(release.gates, gate).enabled:
            problems.append(f"gate {gate} was {stage.outcome} in record {record.name}")
    accepted = bool(accept_inconclusive.strip()) and needs_acceptance(record)
    if not problems and not verdict_passes(record.verdict) and not accepted:
        problems.append(f"record {record.name} verdict is {record.verdict!r}")
    return problems


def unaccepted(gate: str, record: str, reason: str) -> str:
    """The refusal of an inconclusive gate nobody accepted, saying how a person accepts it."""
    return (
        f"gate {gate} was inconclusive in record {record} ({reason}); a person may accept it "
        f'with {ACCEPT_FLAG} "REASON" (kept in the promotions log with who accepted it)'
    )


def accepted_reason(record: Record, accept_inconclusive: str) -> str | None:
    """The acceptance reason a promotion of `record` keeps: None unless it needed one."""
    return accept_inconclusive.strip() if needs_acceptance(record) else None


def promoted(pointer: Pointer | None, entry: PromotedEntry) -> Pointer:
    """The pointer after promoting `entry` (the current one moves into history)."""
    if pointer is None:
        return Pointer(current=entry)
    return Pointer(current=entry, history=[pointer.current, *pointer.history])


def rolled_back(pointer: Pointer | None) -> Pointer:
    """The pointer after returning to the previous promoted release."""
    if pointer is None or not pointer.history:
        raise PromotionError("no previous promoted release to roll back to")
    return Pointer(current=pointer.history[0], history=pointer.history[1:])


def pointer_file(cluster: str) -> Path:
    """A cluster's pointer, relative to the project root; SpecError for a name unfit for a path.

    Cluster names are checked by the cluster spec (letters, digits, `_.-`, no leading dot), so a
    name never leaves `config/promoted/`; a name given some other way is checked the same way.
    """
    if not re.fullmatch(CLUSTER_NAME, cluster):
        raise SpecError(
            f"{cluster!r} is not a cluster name",
            key="cluster",
            expected=f"a name like {CLUSTER_NAME}",
        )
    return POINTER_DIR / f"{cluster}.yaml"


def relative_to_root(path: Path, root: Path) -> str:
    """A path as stored in the pointer and log: relative to the project root when inside it."""
    resolved = path.resolve()
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(resolved)


def spot_check_prompts(hashes: Mapping[str, Any], count: int) -> list[Prompt]:
    """The first `count` short prompts of a record's determinism hashes, as they were sent."""
    chosen: list[Prompt] = []
    for prompt_id, entry in hashes.items():
        if prompt_id == LONG_ID or not isinstance(entry, Mapping) or "prompt" not in entry:
            continue
        chosen.append(
            Prompt(id=prompt_id, text=str(entry["prompt"]), max_tokens=int(entry["max_tokens"]))
        )
        if len(chosen) == count:
            break
    return chosen


def spot_check_differences(
    expected: Mapping[str, Any], got: Mapping[str, Mapping[str, str]]
) -> list[str]:
    """Prompts whose tokens or logprobs hash differs from the record's."""
    found: list[str] = []
    for prompt_id, hashes in got.items():
        want = expected[prompt_id]
        for kind in ("tokens", "logprobs"):
            if hashes[kind] != want.get(kind):
                found.append(f"{prompt_id}: {kind} differ from the record")
    return found
