"""Recompute gate summaries from the raw files the gates kept, with the gates' own code.

The benchmark stage keeps every arm's `arm.json` (every request's receipt) under
`arms/<index>-<role>/`: reading them back in session order and running the same comparison and
decision as the gate must give the very numbers the summary holds. A session that drew on an
A/A ledger of other records (`ledger_gaps` > 0) keeps that ledger (`ledger-used.json`, hashed like
every raw file) and is recomputed with it; one that claims ledger use but keeps no such ledger
cannot be recomputed, which is a problem, not a pass. The determinism stage keeps every
scenario's raw responses, which the gate's pure `judge` turns into the same summary again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flows.bench.compare import SessionDecision, compare_arms, session_decision
from flows.bench.ledger import Ledger, read_ledger
from flows.bench.report import read_arm
from flows.cluster.boot.timeline import BootTimeline
from flows.errors import SparkgateError
from flows.gates.benchmark.rules import LEDGER_FILE, Session, arm_folder, points_summary
from flows.gates.benchmark.summary import BenchmarkSummary, PointRow
from flows.gates.cold_boots.rules import BootObservation, boot_row, rank_figures
from flows.gates.cold_boots.summary import ColdBootsSummary
from flows.gates.determinism.rules import judge
from flows.gates.determinism.summary import DeterminismSummary, ScenarioRow
from flows.gates.outputs import Output, hashes
from flows.gates.traffic import Answered
from flows.record.model import Record, StageEntry
from flows.spec.cluster import Cluster
from flows.spec.release import Release

SAMPLED_FILE = "sampled-streams.json"


def benchmark_problems(stage_dir: Path, summary: BenchmarkSummary, max_arms: int) -> list[str]:
    """Differences between the summary and the comparison recomputed from the raw arms."""
    roles = list(summary.arms)
    if not roles:
        return ["benchmark: the summary has points but names no arms"] if summary.points else []
    ledger, problem = _kept_ledger(stage_dir, summary.ledger_gaps)
    if problem is not None:
        return [problem]
    try:
        reports = [read_arm(arm_folder(stage_dir, i, role)) for i, role in enumerate(roles, 1)]
        new = [r for r, role in zip(reports, roles, strict=True) if role == "candidate"]
        old = [r for r, role in zip(reports, roles, strict=True) if role == "previous"]
        comparison = compare_arms(
            new,
            old,
            ledger=ledger,
            tolerance_pct=summary.tolerance * 100,
            policy=summary.policy(),
            looks=summary.looks,
            slower_rule=summary.slower_rule,
        )
    except (SparkgateError, ValueError) as error:
        return [f"benchmark: the raw arms cannot be compared again: {error}"]
    decision = session_decision(comparison, len(roles), max_arms)
    session = Session(roles, reports, comparison, decision)
    problems = [
        f"benchmark: {kept.point} {kept.unit}: summary {_short(kept)}, "
        f"raw arms give {_short(again)}"
        for kept, again in zip(summary.points, points_summary(session), strict=False)
        if kept != again
    ]
    if len(summary.points) != len(comparison.points):
        problems.append(
            f"benchmark: {len(summary.points)} points in the summary, "
            f"{len(comparison.points)} from the raw arms"
        )
    stopped = decision in (SessionDecision.ADD_PREVIOUS, SessionDecision.ADD_CANDIDATE)
    kept_decision = summary.decision
    if (
        kept_decision is not None
        and kept_decision != decision.value
        and not (stopped and kept_decision == SessionDecision.FAIL_INCONCLUSIVE.value)
    ):
        problems.append(
            f"benchmark: decision {kept_decision!r}, the raw arms give {decision.value!r}"
        )
    return problems


def _kept_ledger(stage_dir: Path, claimed: int) -> tuple[Ledger | None, str | None]:
    """The A/A ledger the session drew on, as the record keeps it (None when it drew on none),
    or the problem that keeps it from being used: missing, unreadable, or not the one claimed."""
    if not claimed:
        return None, None
    where = f"{stage_dir.name}/{LEDGER_FILE}"
    file = stage_dir / LEDGER_FILE
    if not file.is_file():
        return None, (
            f"benchmark: the summary draws on {claimed} A/A ledger sessions, but the record "
            f"keeps no {where}, so its figures cannot be recomputed"
        )
    try:
        ledger = read_ledger(file)
    except (SparkgateError, RecursionError) as error:
        return None, f"benchmark: {where} cannot be read: {str(error).splitlines()[0]}"
    if len(ledger.sessions) != claimed:
        return None, (
            f"benchmark: the summary draws on {claimed} A/A ledger sessions, "
            f"{where} holds {len(ledger.sessions)}"
        )
    return ledger, None


def _short(point: PointRow) -> str:
    keys = ("previous", "candidate", "change", "low", "high", "verdict")
    return ", ".join(f"{key} {getattr(point, key)}" for key in keys)


DETERMINISM_KEYS = ("prompts", "scenarios", "against_previous", "hashes", "chat_hashes")


def determinism_problems(
    record: Record,
    stage: StageEntry,
    previous: Record | None,
    previous_hashes: dict[str, Any] | None,
) -> list[str]:
    """Differences between the summary and the gate's own judgement of the raw responses.

    The gate keeps every scenario's raw responses under scenarios/<name>.json; judging them
    again (with the previous record's hashes it compared against) must give the same
    scenarios, the same comparison with the previous release, the same hashes and outcome.
    """
    folder, kept = record.folder, stage.summary_as(DeterminismSummary)
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
        if kept is not None and _normal(getattr(summary, key)) != _normal(getattr(kept, key))
    ]
    if outcome.value != stage.outcome:
        problems.append(
            f"determinism: outcome {stage.outcome}, the raw responses give {outcome.value}"
        )
    return problems


def _previous_name(record: Record, previous: Record | None) -> str | None:
    """The previous release's name as the gate saw it (its record's spec; else the record's)."""
    if previous is not None:
        return str(previous.release.get("name") or previous.release_name)
    return record.previous


def _normal(value: Any) -> Any:
    """Scenarios compared by name: the files come back sorted, not in the order they ran."""
    if isinstance(value, list) and all(isinstance(item, ScenarioRow) for item in value):
        return sorted(value, key=lambda item: item.name)
    return value


BOOT_KEYS = (
    "ready_s",
    "prepare_s_max",
    "kernels",
    "compiled",
    "cached",
    "liveness_wait_s_max",
    "compiles_after_preparation",
    "compiles_metric",
    "spot_check",
    "passed",
)


def cold_boots_problems(record: Record, stage: StageEntry) -> list[str]:
    """Differences between each boot row and the one its raw boots/<mode>.json gives.

    The raw file keeps the boot's timeline, the compiles seen after preparation, the metric and
    the spot-check outputs; the gate's own `boot_row` over an observation rebuilt from them must
    give the figures of the summary (the `what happened` text aside), judged against the
    reference hashes the summary keeps.
    """
    folder = record.folder
    if folder is None:
        return []
    try:
        kernel_cache = Cluster.model_validate(record.cluster).engine.kernel_cache
    except ValidationError as error:
        return [f"cold_boots: the resolved cluster cannot be read: {error}"]
    summary = stage.summary_as(ColdBootsSummary)
    if summary is None:
        return []
    reference = {prompt: digest.model_dump() for prompt, digest in summary.reference.items()}
    problems: list[str] = []
    for kept in summary.boots:
        file = folder / stage.stage / "boots" / f"{kept.mode}.json"
        if not file.is_file():
            continue
        try:
            raw = json.loads(file.read_text())
            again = boot_row(_observation(raw, kernel_cache, reference))
        except (ValidationError, ValueError, TypeError, KeyError) as error:
            problems.append(f"cold_boots: {file.name} cannot be read again: {error}")
            continue
        problems += [
            f"cold_boots: {kept.mode}: {key} is {getattr(kept, key)!r}, the raw boot gives "
            f"{getattr(again, key)!r}"
            for key in BOOT_KEYS
            if getattr(kept, key) != getattr(again, key)
        ]
    return problems


def _observation(
    raw: dict[str, Any], kernel_cache: str, reference: dict[str, Any]
) -> BootObservation:
    """The gate's BootObservation of one boot, rebuilt from its raw file."""
    emptied = sorted(
        {int(t["rank"]) for t in raw.get("emptied", []) if t.get("kind") == kernel_cache}
    )
    mode = str(raw["mode"])
    if "timeline" not in raw or "compile_events" not in raw:
        error = raw.get("error") or "no timeline"
        text = str(error) if "timeline" not in raw else f"traffic: {error}"
        return BootObservation(mode=mode, emptied_ranks=emptied, error=text)
    timeline = BootTimeline.model_validate(raw["timeline"])
    outputs = [Output.model_validate(o) for o in raw.get("spot") or []]
    mine = hashes(outputs)
    differing = sorted(
        {
            o.prompt
            for o in outputs
            if not isinstance(reference.get(o.prompt), dict)
            or any(reference[o.prompt].get(k) != v for k, v in mine[o.prompt].items())
        }
    )
    judged = bool(reference) and bool(outputs)
    return BootObservation(
        mode=mode,
        emptied_ranks=emptied,
        ready_s=timeline.ready_s,
        ranks=rank_figures(timeline),
        compiles_logged=len(raw.get("compile_events") or []),
        compiles_metric=raw.get("compiles_metric"),
        spot_check=("differs" if differing else "identical") if judged else "not run",
        spot_differing=differing if judged else [],
    )
