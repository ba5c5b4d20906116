"""The determinism gate's rules: judge raw runs against the reference and the previous (pure).

Kept apart from the traffic and the boots so every rule is unit-tested on hand-made data and a
reviewer can recompute the verdict and summary from the raw responses of a record.

The chat probes (`chat_tool`, `chat_json`) are judged with the completions: tokens, logprobs,
and their canonical response (`flows.gates.determinism.chat`). Their hashes are kept apart
(`chat_hashes`), and against the previous release they are compared only when the previous
record has them, so a release after one that sent no chat probes is not failed for that.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from flows.gates.base import Outcome
from flows.gates.determinism.chat import content_hash, output_of
from flows.gates.determinism.summary import (
    ChatHashes,
    DeterminismSummary,
    FirstDifference,
    PreviousReport,
    PromptHashes,
    ScenarioRow,
)
from flows.gates.outputs import (
    Difference,
    Output,
    ScenarioReport,
    first_difference,
    hashes,
    max_overlap,
    shown_names,
    top_token_agreement,
)
from flows.gates.prompts import CHAT_IDS, Prompt
from flows.gates.traffic import Answered
from flows.spec.release import DeterminismGate, Outputs

NAME = "determinism"
Runs = dict[str, list[Answered]]


def chat_hashes(outputs: Iterable[Output]) -> dict[str, dict[str, str]]:
    """Per chat probe: {"tokens", "logprobs", "content"} SHA-256s."""
    chat = [o for o in outputs if o.prompt in CHAT_IDS]
    return {
        prompt: {**digest, "content": content_hash(o)}
        for o, (prompt, digest) in zip(chat, hashes(chat).items(), strict=True)
    }


def _completions(outputs: Iterable[Output]) -> list[Output]:
    return [o for o in outputs if o.prompt not in CHAT_IDS]


def _chat_against(
    current: Sequence[Output], previous: Mapping[str, Mapping[str, Any]]
) -> tuple[list[str], int]:
    """Chat probes whose hashes differ from the previous record's, and how many were compared."""
    compared = {
        prompt: digest
        for prompt, digest in chat_hashes(current).items()
        if isinstance(previous.get(prompt), Mapping) and "content" in previous[prompt]
    }
    differing = [
        prompt
        for prompt, digest in compared.items()
        if any(previous[prompt].get(key) != value for key, value in digest.items())
    ]
    return differing, len(compared)


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
    agreement too. A prompt missing from the previous record counts as differing; a chat probe
    missing from it is not compared (`chat_total` counts those that were).
    """
    if not enabled:
        return PreviousReport(mode="none", reason="comparison with the previous release is off")
    if previous is None:
        return PreviousReport(mode="none", reason=f"no outputs of {previous_name} to compare with")
    chat_differing, chat_total = _chat_against(current, previous)
    chat = {"chat_identical": chat_total - len(chat_differing), "chat_total": chat_total}
    current = _completions(current)
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
        wrong = [*differing, *chat_differing]
        reason = (
            f"outputs unchanged: all {total} prompts{_chat_note(chat_total)} hash as "
            f"{previous_name}'s"
            if not wrong
            else f"outputs declared unchanged but {len(wrong)} of {total + chat_total} prompts "
            f"differ from {previous_name}: {shown_names(wrong)}"
        )
        return PreviousReport(
            mode="unchanged",
            identical=identical,
            total=total,
            reason=reason,
            differing=wrong,
            **chat,
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
        differing=[*differing, *chat_differing],
        **chat,
    )


def _chat_note(compared: int) -> str:
    return f" and {compared} chat probes" if compared else ""


def compare_outputs(
    name: str, reference: Mapping[str, Output], outputs: Sequence[Output]
) -> ScenarioReport:
    """Each response against its prompt's reference: tokens, logprobs, then a chat probe's
    canonical response (a prompt with no reference differs at 0)."""
    differences: list[Difference] = []
    for output in outputs:
        ref = reference.get(output.prompt)
        found = (
            Difference(prompt=output.prompt, index=0, what="token")
            if ref is None
            else first_difference(ref, output) or _content_difference(ref, output)
        )
        if found is not None:
            differences.append(found)
    return ScenarioReport(
        name=name,
        identical=len(outputs) - len(differences),
        differing=len(differences),
        first_difference=differences[0] if differences else None,
        differences=differences,
    )


def _content_difference(reference: Output, other: Output) -> Difference | None:
    """Where a chat probe's canonical response first differs (None: same, or a completion)."""
    if reference.prompt not in CHAT_IDS or reference.text == other.text:
        return None
    pairs = zip(reference.text, other.text, strict=False)
    index = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
    at = min(len(reference.text), len(other.text)) if index is None else index
    return Difference(prompt=reference.prompt, index=at, what="content")


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
    settings: DeterminismGate,
    declared: Outputs,
    previous: str | None,
    previous_hashes: Mapping[str, Mapping[str, Any]] | None,
) -> tuple[DeterminismSummary, Outcome, str]:
    """The summary and verdict from the raw runs (pure; also what a verifier recomputes).

    `declared` is the release's declared output change, `previous` the previous release's
    name (None: the release has none) and `previous_hashes` that release's stored hashes.
    """
    outputs = {name: [output_of(a) for a in run] for name, run in runs.items()}
    reference = {o.prompt: o for o in outputs["alone"]}
    scenarios = [
        compare_outputs(name, reference, outs) for name, outs in outputs.items() if name != "alone"
    ]
    compared = against_previous(
        outputs["alone"],
        previous_hashes,
        change=declared.change,
        change_reason=declared.reason,
        enabled=settings.against_previous and previous is not None,
        previous_name=previous or "the previous release",
    )
    passed, reason = determinism_verdict(scenarios, compared)
    summary = _summary(runs, outputs["alone"], scenarios, compared, settings)
    return summary, Outcome.PASSED if passed else Outcome.FAILED, reason


def stored_hashes(
    alone: Sequence[Answered],
    prompts: Sequence[Prompt],
    long: Prompt,
    chat: Sequence[Prompt] = (),
) -> dict[str, Any]:
    """hashes.json: per prompt the two hashes, plus the tokens and text a successor compares.

    A chat probe's entry also has its `content` hash, its `kind` and its user message as
    `chat` (not `prompt`: promotion's spot check sends `prompt` entries as completions).
    """
    texts = {p.id: p for p in [*prompts, long]}
    probes = {p.id: p for p in chat}
    all_outputs = [output_of(a) for a in alone]
    outputs = _completions(all_outputs)
    digests = hashes(outputs)
    probe_entries = {
        prompt: {
            **digest,
            "token_ids": next(o.token_ids for o in all_outputs if o.prompt == prompt),
            "kind": probes[prompt].kind,
            "chat": probes[prompt].text,
            "max_tokens": probes[prompt].max_tokens,
        }
        for prompt, digest in chat_hashes(all_outputs).items()
        if prompt in probes
    }
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
    } | probe_entries


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
    completions = _completions(alone)
    return DeterminismSummary(
        prompts=len(completions),
        max_tokens=settings.max_tokens,
        scenarios=[scenario_row(s) for s in scenarios],
        against_previous=previous,
        hashes={p: PromptHashes.model_validate(d) for p, d in hashes(completions).items()},
        chat_probes=len(alone) - len(completions),
        chat_hashes={p: ChatHashes.model_validate(d) for p, d in chat_hashes(alone).items()},
        staggered_overlap=max_overlap([(a.sent_s, a.answered_s) for a in staggered]),
        staggered_requests=len(staggered),
        cached_tokens=[output_of(a).cached_tokens for a in cached],
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
