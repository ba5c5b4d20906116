"""The benchmark gate's rules: the arm session, the order the statistics read, the reason (pure).

The session loop (`run_session`) takes a function that measures one arm, so the arm-adding logic
is tested on synthetic arms and `verify` rebuilds the summary from the raw arms of a record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from flows.bench.compare import Comparison, PointComparison, SessionDecision, session_decision
from flows.bench.report import ArmReport
from flows.gates.base import Outcome
from flows.gates.benchmark.summary import PointRow

NAME = "benchmark"
LEDGER_FILE = "ledger-used.json"
"""The A/A ledger a session drew on, kept in its stage folder so verify can recompute it."""
Role = Literal["candidate", "previous"]
Focus = frozenset[str] | None
"""The points an added arm must measure (None: the whole suite)."""
MeasureArm = Callable[[int, Role, Focus], ArmReport]
Compare = Callable[[list[ArmReport], list[ArmReport]], Comparison]


@dataclass(frozen=True)
class Session:
    """A finished session: arms in the order run, the last comparison and the decision."""

    roles: list[Role]
    reports: list[ArmReport]
    comparison: Comparison
    decision: SessionDecision
    stopped_early: bool = False

    def of(self, role: Role) -> list[ArmReport]:
        """This role's arms, in session order."""
        return [r for r, kind in zip(self.reports, self.roles, strict=True) if kind == role]


def focused_arm(report: ArmReport, focus: Focus) -> ArmReport:
    """The arm with only the points an added arm measures (all of them when focus is None)."""
    if focus is None:
        return report
    return report.model_copy(
        update={"points": {k: v for k, v in report.points.items() if k in focus}}
    )


def order_problem(roles: Sequence[Role]) -> str | None:
    """The comparison reads arms as C1, P1, C2, P2, ...: any other order is refused by name."""
    expected = ["candidate" if i % 2 == 0 else "previous" for i in range(len(roles))]
    if list(roles) != expected:
        return (
            f"arms {', '.join(roles)}: arms must alternate starting with the candidate "
            f"({', '.join(expected)}), the order the statistics assume"
        )
    return None


def session_looks(first_arms: int, max_arms: int) -> int:
    """How many times a session may compare: after its first arms, then after each added arm."""
    return max(1, max_arms - first_arms + 1)


def run_session(
    first: Sequence[Role],
    max_arms: int,
    measure: MeasureArm,
    compare: Compare,
    *,
    may_add: Callable[[], bool] = lambda: True,
    on_compare: Callable[[Comparison, SessionDecision, int], None] = lambda _c, _d, _n: None,
) -> Session:
    """Run the first arms, then decide; while undecided add the next interleaved arm.

    `measure(index, role, focus)` measures arm `index` (from 1): the first arms the whole suite
    (focus None), every added arm only the points still undecided (a sequential plan: arms are
    spent where they can still change a decision; a decided point keeps the estimate of the arms
    it was decided on, a prefix of the session). `may_add()` False (e.g. past the gate's time
    limit) stops adding, which leaves an undecided session failed as inconclusive.
    """
    roles: list[Role] = []
    reports: list[ArmReport] = []
    for planned in first:
        reports.append(measure(len(roles) + 1, planned, None))
        roles.append(planned)
    while True:
        new = [r for r, kind in zip(reports, roles, strict=True) if kind == "candidate"]
        old = [r for r, kind in zip(reports, roles, strict=True) if kind == "previous"]
        comparison = compare(new, old)
        decision = session_decision(comparison, len(roles), max_arms)
        on_compare(comparison, decision, len(roles))
        if decision not in (SessionDecision.ADD_PREVIOUS, SessionDecision.ADD_CANDIDATE):
            return Session(roles, reports, comparison, decision)
        if not may_add():
            return Session(roles, reports, comparison, SessionDecision.FAIL_INCONCLUSIVE, True)
        role: Role = "previous" if decision is SessionDecision.ADD_PREVIOUS else "candidate"
        focus = frozenset(row.point for row in comparison.inconclusive)
        reports.append(measure(len(roles) + 1, role, focus))
        roles.append(role)


def session_outcome(decision: SessionDecision) -> Outcome:
    """The gate's outcome for a session's decision: an inconclusive session is neither passed
    nor failed (a person decides), every other failure fails."""
    if decision is SessionDecision.PASS:
        return Outcome.PASSED
    if decision is SessionDecision.FAIL_INCONCLUSIVE:
        return Outcome.INCONCLUSIVE
    return Outcome.FAILED


def _role_mean(reports: Sequence[ArmReport], point: str, metric: str) -> float | None:
    """Mean over this role's arms of each arm's mean (the level the table shows)."""
    means = [
        float(np.mean(values))
        for report in reports
        if point in report.points and (values := report.points[point].values(metric))
    ]
    return float(np.mean(means)) if means else None


def points_summary(session: Session) -> list[PointRow]:
    """One row per point and gated metric, as the record renders it."""
    candidates, previous = session.of("candidate"), session.of("previous")
    return [
        PointRow(
            point=row.point,
            unit=row.metric,
            higher_is_better=row.higher_is_better,
            previous=_role_mean(previous, row.point, row.metric),
            candidate=_role_mean(candidates, row.point, row.metric),
            change=row.arms.change_pct if row.arms else None,
            low=row.arms.low_pct if row.arms else None,
            high=row.arms.high_pct if row.arms else None,
            verdict=row.verdict.value,
            gated=row.gated,
            tolerance_pct=row.tolerance_pct,
        )
        for row in session.comparison.points
    ]


def _interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "no interval"
    return f"[{low:+.1f}, {high:+.1f}]%"


def kv_capacity_by_role(session: Session) -> dict[str, float]:
    """The smallest KV cache capacity (tokens) each role's arms reported, where they did: a
    release that leaves less memory for the cache serves fewer sequences, which no time shows."""
    found: dict[str, float] = {}
    for role in ("previous", "candidate"):
        values = [
            float(value)
            for report in session.of(role)
            if isinstance(value := report.identity.get("kv_capacity_tokens"), int | float)
        ]
        if values:
            found[role] = min(values)
    return found


def _tolerance(rows: Sequence[PointComparison], gate_pct: float) -> str:
    """The tolerance these rows were decided at ("15%", or "3-15%" when they differ)."""
    values = sorted({gate_pct if row.tolerance_pct is None else row.tolerance_pct for row in rows})
    if len(values) > 1:
        return f"{values[0]:g}-{values[-1]:g}%"
    return f"{values[0] if values else gate_pct:g}%"


def reason_for(session: Session, tolerance_pct: float, max_arms: int) -> str:
    """The one line a person reads first, naming the points that decided."""
    comparison, arms = session.comparison, len(session.roles)
    if session.decision is SessionDecision.PASS:
        gating = comparison.gating
        faster = sum(p.verdict.value == "faster" for p in gating)
        metrics = ", ".join(sorted({p.metric for p in gating}))
        allowed = _tolerance(gating, tolerance_pct)
        return (
            f"no point slower than {allowed} in {metrics} over {arms} arms "
            f"({faster} faster, {len(gating) - faster} level)"
        )
    if session.decision is SessionDecision.FAIL_LOST:
        lost = [
            *comparison.missing,
            *(f"{k} ({v} failed)" for k, v in comparison.failed_requests.items()),
        ]
        return f"the candidate lost measurements: {', '.join(lost)}"
    if session.decision is SessionDecision.FAIL_SLOWER:
        slower = [
            f"{p.point} {p.metric} {p.arms.change_pct:+.1f}% "
            + _interval(p.arms.low_pct, p.arms.high_pct)
            if p.arms
            else f"{p.point} {p.metric}"
            for p in comparison.regressions
        ]
        beyond = _tolerance(comparison.regressions, tolerance_pct)
        return f"slower beyond {beyond}: {'; '.join(slower)}"
    undecided = ", ".join(f"{p.point} {p.metric}" for p in comparison.inconclusive[:6])
    limit = "the gate's time limit" if session.stopped_early else f"max_arms {max_arms}"
    return f"inconclusive after {arms} arms ({limit}): {undecided}"


def arm_folder(out_dir: Path, index: int, role: Role) -> Path:
    """Where one arm's raw receipts go."""
    return out_dir / "arms" / f"{index}-{role}"


def disturbed_folder(out_dir: Path, index: int, role: Role) -> Path:
    """Where a disturbed arm is kept as evidence: the first free `<i>-<role>-disturbed-<k>`."""
    base = arm_folder(out_dir, index, role)
    attempt = 1
    while (found := base.with_name(f"{base.name}-disturbed-{attempt}")).exists():
        attempt += 1
    return found
