"""The cross-session rule (pure): a candidate measured on hosts that cannot go back (a new kernel)
against the previous release's arms of its newest record on this shape.

No previous arm can be run on the changed hosts, so the comparison spans two sessions, and
nothing cancels what differs between them (the day, the room, the fabric's state). The rule
says so in its width: the change is the mean of the candidate's arms against the mean of the
recorded arms on the log scale, its arm-level interval uses boot noise pooled from both
sessions' arms (and the A/A ledger), and each end is then widened by a stated allowance for
what differs between sessions, `cross_session_allowance_pct`, which the release states and the
record keeps. The row scaffolding (points, gated metrics, the recipe's reading of the first
arms, lost measurements) is the one-session comparison's; only the estimate and verdict differ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from flows.bench.compare import Comparison, PointComparison, compare_arms, slower_alpha
from flows.bench.ledger import Ledger
from flows.bench.report import ArmReport
from flows.bench.stats import (
    DEFAULT_ALPHA,
    ArmEstimate,
    SlowerRule,
    Verdict,
    look_alpha,
    non_inferiority,
    t_two_sided,
)
from flows.spec.gate_policy import GatePolicy

RULE = (
    "cross-session: mean of the candidate's arms vs the recorded arms (log scale), boot noise "
    "pooled from both sessions' arms and the A/A ledger, interval at the session's look level "
    "(slower also at that split among the gated points) widened on each side by the stated "
    "allowance"
)


class CrossSession(BaseModel):
    """What the record states of a cross-session comparison: the rule, its width, the arms."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: str = RULE
    allowance_pct: float = Field(description="each end of every interval widened by this, %")
    record: str = Field(description="the record whose arms stood for the previous release")
    recorded_arms: list[str] = Field(description="their folders under this stage's arms/")


def _pct(log_ratio: float) -> float:
    return 100.0 * math.expm1(log_ratio)


def estimate(
    new: Sequence[float],
    old: Sequence[float],
    *,
    higher_is_better: bool,
    gaps: Sequence[float],
    tolerance_pct: float,
    allowance_pct: float,
    alphas: tuple[float, float] = (DEFAULT_ALPHA, DEFAULT_ALPHA),
) -> ArmEstimate:
    """The candidate's change from arm means of two sessions (each list: one mean per arm).

    `alphas`: the two-sided error of the interval, and the stricter one a slower verdict must
    also hold at (as the one-session rule: looks, then the gated points)."""
    y_new, y_old = np.log(np.asarray(new, float)), np.log(np.asarray(old, float))
    d = float(y_new.mean() - y_old.mean())
    squares = float(((y_new - y_new.mean()) ** 2).sum() + ((y_old - y_old.mean()) ** 2).sum())
    ledger = np.asarray(list(gaps), float)
    df = float(len(new) - 1 + len(old) - 1 + len(ledger))
    low = high = boot_low = boot_high = None
    verdict = Verdict.INCONCLUSIVE  # no arm-level df: boot noise unknown, so no decision
    if df >= 1:
        se = math.sqrt((squares + float(ledger @ ledger) / 2) / df * (1 / len(new) + 1 / len(old)))

        def decide(alpha: float) -> tuple[float, float, float, float, Verdict]:
            half = t_two_sided(df, alpha) * se
            boot = (_pct(d - half), _pct(d + half))
            wide = (boot[0] - allowance_pct, boot[1] + allowance_pct)
            said = non_inferiority(
                *wide, change_pct=_pct(d), higher_is_better=higher_is_better,
                tolerance_pct=tolerance_pct, rule=SlowerRule.SIGNIFICANT,
            )  # fmt: skip
            return (*boot, *wide, said)

        boot_low, boot_high, low, high, verdict = decide(alphas[0])
        if (
            verdict is Verdict.SLOWER
            and alphas[1] < alphas[0]
            and decide(alphas[1])[4] is not (Verdict.SLOWER)
        ):
            verdict = Verdict.INCONCLUSIVE  # slower must hold at the stricter level too
    return ArmEstimate(
        change_pct=_pct(d), low_pct=low, high_pct=high, boot_low_pct=boot_low,
        boot_high_pct=boot_high, within_low_pct=None, within_high_pct=None, boot_df=df,
        arms=len(new) + len(old), ledger_gaps=len(ledger), verdict=verdict,
        tolerance_pct=tolerance_pct, alpha=alphas[0], slower_alpha=alphas[1],
    )  # fmt: skip


def _means(arms: Sequence[ArmReport], point: str, metric: str) -> list[float] | None:
    found = []
    for report in arms:
        if point not in report.points:
            continue
        values = report.points[point].values(metric)
        if not values or min(values) <= 0:
            return None
        found.append(float(np.mean(values)))
    return found or None


def compare_across_sessions(
    new: Sequence[ArmReport],
    old: Sequence[ArmReport],
    *,
    allowance_pct: float,
    ledger: Ledger | None,
    tolerance_pct: float,
    policy: GatePolicy | None,
    looks: int,
) -> Comparison:
    """The one-session comparison's rows, each decided by the cross-session estimate at the
    level of a session that may look `looks` times."""
    base = compare_arms(
        new, old, ledger=ledger, tolerance_pct=tolerance_pct, policy=policy, looks=looks
    )
    alpha = look_alpha(looks)
    gated = sum(row.gated for row in base.points)
    alphas = (alpha, slower_alpha(alpha, gated, looks, SlowerRule.SIGNIFICANT))
    rows: list[PointComparison] = []
    for row in base.points:
        means = (_means(new, row.point, row.metric), _means(old, row.point, row.metric))
        arms = None
        if means[0] is not None and means[1] is not None:
            arms = estimate(
                means[0], means[1], higher_is_better=row.higher_is_better,
                gaps=ledger.for_metric(row.point, row.metric) if ledger else [],
                tolerance_pct=row.tolerance_pct or tolerance_pct, allowance_pct=allowance_pct,
                alphas=alphas,
            )  # fmt: skip
        verdict = arms.verdict if arms else Verdict.INCONCLUSIVE
        rows.append(row.model_copy(update={"arms": arms, "verdict": verdict}))
    return base.model_copy(update={"points": rows})
