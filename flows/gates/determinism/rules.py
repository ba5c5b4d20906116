"""The determinism gate's rules: judge raw runs against the reference and the previous (pure).

Kept apart from the traffic and the boots so every rule is unit-tested on hand-made data and a
reviewer can recompute the verdict and summary from the raw responses of a record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from flows.gates.base import GateContext, Outcome
from flows.gates.determinism.summary import (
    DeterminismSummary,
    FirstDifference,
    PreviousReport,
    PromptHashes,
    ScenarioRow,
)
from flows.gates.outputs import (
    Output,
    ScenarioReport,
    compare_scenario,
    hashes,
    max_overlap,
    output_from_completion,
    shown_names,
    top_token_agreement,
)
from flows.gates.prompts import Prompt
from flows.gates.traffic import Answered
from flows.spec.release import DeterminismGate

NAME = "determinism"
Runs = dict[str, list[Answered]]


def against_previous(
    current: Sequence[Output],
    previous: Mapping[str, Mapping[str, Any]] | None,
    *,
    change: Literal["unchanged", "changed"],
    change_reason: str | None,
    enabled: bool = True,
    previous_name: str = "the previous release",
) -> PreviousReport:
    """Compare per-prompt hashes with the previous record's (`hashes.json` entries).

    An entry may also carry `token_ids`; then a `changed` release reports the top-token
    agreement too. A prompt missing from the previous record counts as differing.
    """
    if not enabled:
        return PreviousReport(mode="none", reason="comparison with the previous release is off")
    if previous is None:
        return PreviousReport(mode="none", reason=f"no outputs of {previous_name} to compare with")
    mine = hashes(current)
    differing = [
        prompt
        for prompt, digest in mine.items()
        if prompt not in previous
        or previous[prompt].get("tokens") != digest["tokens"]
        or previous[prompt].get("logprobs") != digest["logprobs"]
    ]
    total = len(mine)
    identical = total - len(differing)
    if change == "unchanged":
        reason = (
            f"outputs unchanged: all {total} prompts hash as {previous_name}'s"
            if not differing
            else f"outputs declared unchanged but {len(differing)} of {total} prompts differ "
            f"from {previous_name}: {shown_names(differing)}"
        )
        return PreviousReport(
            mode="unchanged", identical=identical, total=total, reason=reason, differing=differing
        )
    before = {
        prompt: [int(t) for t in entry["token_ids"]]
        for prompt, entry in previous.items()
        if isinstance(entry.get("token_ids"), list)
    }
    agreement = top_token_agreement({o.prompt: o.token_ids for o in current}, before)
    return PreviousReport(
        mode="changed",
        identical=identical,
        total=total,
        top_token_agreement=agreement,
        reason=f"outputs changed: {change_reason or 'no reason given'}",
        differing=differing,
    )


def determinism_verdict(
    scenarios: Sequence[ScenarioReport], previous: PreviousReport
) -> tuple[bool, str]:
    """Pass when every scenario matched the served-alone reference and the previous check held."""
    problems = [
        f"{s.name} differs for "
        + shown_names([f"{d.prompt} ({d.what} {d.index})" for d in s.differences])
        for s in scenarios
        if s.differing
    ]
    if not previous.passed:
        problems.append(previous.reason)
    if problems:
        return False, "; ".join(problems)
    names = ", ".join(s.name for s in scenarios)
    return True, f"identical in every scenario ({names}); {previous.reason}"


def judge(
    runs: Runs,
    context: GateContext,
    settings: DeterminismGate,
    previous_hashes: Mapping[str, Mapping[str, Any]] | None,
) -> tuple[DeterminismSummary, Outcome, str]:
    """The summary and verdict from the raw runs (pure; also what a verifier recomputes)."""
    outputs = {
        name: [output_from_completion(a.prompt, a.response) for a in run]
        for name, run in runs.items()
    }
    reference = {o.prompt: o for o in outputs["alone"]}
    scenarios = [
        compare_scenario(name, reference, outs) for name, outs in outputs.items() if name != "alone"
    ]
    previous = against_previous(
        outputs["alone"],
        previous_hashes,
        change=context.release.outputs.change,
        change_reason=context.release.outputs.reason,
        enabled=settings.against_previous and context.previous is not None,
        previous_name=context.previous.name if context.previous else "the previous release",
    )
    passed, reason = determinism_verdict(scenarios, previous)
    summary = _summary(runs, outputs["alone"], scenarios, previous, settings)
    return summary, Outcome.PASSED if passed else Outcome.FAILED, reason


def stored_hashes(
    alone: Sequence[Answered], prompts: Sequence[Prompt], long: Prompt
) -> dict[str, Any]:
    """hashes.json: per prompt the two hashes, plus the tokens and text a successor compares."""
    texts = {p.id: p for p in [*prompts, long]}
    outputs = [output_from_completion(a.prompt, a.response) for a in alone]
    digests = hashes(outputs)
    return {
        o.prompt: {
            **digests[o.prompt],
            "token_ids": o.token_ids,
            "prompt": texts[o.prompt].text
            if o.prompt != long.id
            else f"<long prompt, {len(long.text)} chars>",
            "max_tokens": texts[o.prompt].max_tokens,
        }
        for o in outputs
    }


def scenario_row(report: ScenarioReport) -> ScenarioRow:
    """The record's row of a scenario (its first difference as {prompt, index})."""
    first = report.first_difference
    return ScenarioRow(
        name=report.name,
        identical=report.identical,
        differing=report.differing,
        first_difference=None
        if first is None
        else FirstDifference(prompt=first.prompt, index=first.index),
        differences=list(report.differences),
    )


def _summary(
    runs: Runs,
    alone: Sequence[Output],
    scenarios: Sequence[ScenarioReport],
    previous: PreviousReport,
    settings: DeterminismGate,
) -> DeterminismSummary:
    staggered = runs.get("staggered", [])
    cached = list(runs.get("cached", []))[1::2]
    return DeterminismSummary(
        prompts=len(alone),
        max_tokens=settings.max_tokens,
        scenarios=[scenario_row(s) for s in scenarios],
        against_previous=previous,
        hashes={p: PromptHashes.model_validate(d) for p, d in hashes(alone).items()},
        staggered_overlap=max_overlap([(a.sent_s, a.answered_s) for a in staggered]),
        staggered_requests=len(staggered),
        cached_tokens=[output_from_completion(a.prompt, a.response).cached_tokens for a in cached],
        sampled_streams=settings.sampled_streams,
    )


PREVIOUS_FILE = "previous-hashes.json"
"""The previous release's hashes as this record compared against them, so it verifies alone."""


def hashes_digest(hashes: Mapping[str, Any]) -> str:
    """SHA-256 of the hashes in canonical JSON: equal tables have equal digests."""
    canonical = json.dumps(hashes, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def previous_copy(release: str, record: str | None, hashes: Mapping[str, Any]) -> dict[str, Any]:
    """What the record keeps of what it was compared against: whose hashes, their digest, them."""
    return {"release": release, "record": record, "sha256": hashes_digest(hashes), "hashes": hashes}
