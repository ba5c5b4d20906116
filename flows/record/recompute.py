"""Recompute the benchmark gate's points and decision from the raw arm receipts it kept.

The benchmark stage keeps every arm's `arm.json` (every request's receipt) under
`arms/<index>-<role>/`. Reading them back in session order and running the same comparison
and decision as the gate must give the very numbers the summary holds; any difference means a
receipt or the summary was changed. A session that drew on an A/A ledger of other records
(`ledger_gaps` > 0) cannot be recomputed from this record alone and is left to the other checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flows.errors import SparkgateError


def benchmark_problems(stage_dir: Path, summary: dict[str, Any], max_arms: int) -> list[str]:
    """Differences between the summary and the comparison recomputed from the raw arms."""
    from flows.bench.compare import Decision, compare_arms, session_decision  # noqa: PLC0415
    from flows.bench.report import read_arm  # noqa: PLC0415
    from flows.gates.benchmark import Session, arm_folder, points_summary  # noqa: PLC0415

    roles = list(summary.get("arms") or [])
    if not roles or summary.get("ledger_gaps") or "points" not in summary:
        return []
    try:
        reports = [read_arm(arm_folder(stage_dir, i, role)) for i, role in enumerate(roles, 1)]
        new = [r for r, role in zip(reports, roles, strict=True) if role == "candidate"]
        old = [r for r, role in zip(reports, roles, strict=True) if role == "previous"]
        tolerance = float(summary.get("tolerance", 0.03)) * 100
        comparison = compare_arms(new, old, tolerance_pct=tolerance)
    except (SparkgateError, ValueError) as error:
        return [f"benchmark: the raw arms cannot be compared again: {error}"]
    decision = session_decision(comparison, len(roles), max_arms)
    session = Session(roles, reports, comparison, decision)
    problems = [
        f"benchmark: {kept.get('point')} {kept.get('unit')}: summary {_short(kept)}, "
        f"raw arms give {_short(again)}"
        for kept, again in zip(summary["points"], points_summary(session), strict=False)
        if kept != again
    ]
    if len(summary["points"]) != len(comparison.points):
        problems.append(
            f"benchmark: {len(summary['points'])} points in the summary, "
            f"{len(comparison.points)} from the raw arms"
        )
    stopped = decision in (Decision.ADD_PREVIOUS, Decision.ADD_CANDIDATE)
    kept_decision = summary.get("decision")
    if (
        kept_decision is not None
        and kept_decision != decision.value
        and not (stopped and kept_decision == Decision.FAIL_INCONCLUSIVE.value)
    ):
        problems.append(
            f"benchmark: decision {kept_decision!r}, the raw arms give {decision.value!r}"
        )
    return problems


def _short(point: Any) -> str:
    keys = ("previous", "candidate", "change", "low", "high", "verdict")
    return ", ".join(f"{key} {point.get(key)}" for key in keys)
