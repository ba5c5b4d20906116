"""The benchmark stage of a record checked again: the comparison and decision from the raw arms.

The benchmark stage keeps every arm's `arm.json` (every request's receipt) under
`arms/<index>-<role>/`: reading them back in session order and running the same comparison and
decision as the gate must give the very numbers the summary holds. A session that drew on an
A/A ledger of other records (`ledger_gaps` > 0) keeps that ledger (`ledger-used.json`, hashed like
every raw file) and is recomputed with it; one that claims ledger use but keeps no such ledger
cannot be recomputed, which is a problem, not a pass.
"""

from __future__ import annotations

from pathlib import Path

from flows.bench.compare import SessionDecision, compare_arms, session_decision
from flows.bench.ledger import Ledger, read_ledger
from flows.bench.report import read_arm
from flows.errors import SparkgateError
from flows.gates.benchmark.cross_rules import compare_across_sessions
from flows.gates.benchmark.cross_session import as_session, read_recorded
from flows.gates.benchmark.rules import LEDGER_FILE, Session, arm_folder, points_summary
from flows.gates.benchmark.summary import BenchmarkSummary, PointRow


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
        cross = summary.cross_session
        if cross is not None:  # an irreversible host change: the recorded arms it kept
            old = read_recorded(stage_dir, cross)
            comparison = compare_across_sessions(
                new, old, allowance_pct=cross.allowance_pct, ledger=ledger,
                tolerance_pct=summary.tolerance * 100, policy=summary.policy(),
                looks=summary.looks or 1,
            )  # fmt: skip
        else:
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
    session = (
        as_session(new, old, comparison, decision)
        if cross is not None
        else Session(roles, reports, comparison, decision)
    )
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
