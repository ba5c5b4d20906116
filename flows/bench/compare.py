"""Compare a candidate's arms with the previous release's arms, point by point.

Two readings are produced for every gated metric of every shared point:

* the recipe's: describe() of the first candidate arm against the first previous arm, the Welch
  change and interval, its faster/slower/same verdict and regression rule, so a table lines up
  with the recipe's `bench --compare`;
* ours, the one the gate uses: the arm-level estimate over all arms, assumed to have been run
  interleaved in session order C1, P1, C2, P2, ... with boot noise from the session and an A/A
  ledger, and a non-inferiority verdict. Without any arm-level degrees of freedom (two arms and
  no ledger) the verdict is inconclusive: boot noise is unknown, so nothing can be concluded.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from enum import StrEnum
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from flows.bench.ledger import Ledger
from flows.bench.policy import workload_rules
from flows.bench.report import ArmReport, higher_is_better
from flows.bench.stats import (
    DEFAULT_TOLERANCE_PCT,
    Arm,
    ArmEstimate,
    Change,
    Described,
    RecipeVerdict,
    SlowerRule,
    Verdict,
    difference,
    estimate_arms,
    look_alpha,
    recipe_regression,
    recipe_verdict,
)
from flows.errors import BenchError
from flows.spec.gate_policy import GatePolicy

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class PointComparison(BaseModel):
    """One metric of one point: both arms' summaries, the recipe's reading and ours."""

    model_config = _FROZEN

    point: str = Field(description="point name, e.g. decode/prose-c1")
    metric: str = Field(description="metric compared, e.g. step_ms")
    higher_is_better: bool = Field(description="direction of the metric")
    new: Described = Field(description="first candidate arm")
    old: Described = Field(description="first previous arm")
    welch: Change | None = Field(description="recipe Welch change; None if n < 2")
    recipe_verdict: RecipeVerdict | None = Field(description="recipe faster/slower/same")
    recipe_regression: bool = Field(description="recipe rule: slower beyond the tolerance")
    arms: ArmEstimate | None = Field(description="arm-level estimate over every arm")
    verdict: Verdict = Field(description="non-inferiority verdict the gate uses")
    gated: bool = Field(default=True, description="whether this row decides the gate")
    tolerance_pct: float | None = Field(
        default=None,
        description="tolerance the verdict used when not the gate's (a metric's or workload's), %",
    )


class Comparison(BaseModel):
    """The whole comparison, as written to compare.json."""

    model_config = _FROZEN

    new: list[str] = Field(description="candidate arm labels in session order")
    old: list[str] = Field(description="previous arm labels in session order")
    tolerance_pct: float = Field(description="practical floor")
    ledger_gaps: int = Field(description="A/A ledger sessions available")
    looks: int | None = Field(
        default=None,
        description="times the session may compare (intervals at look_alpha(looks), slower "
        "verdicts also at that divided by the gated rows); None: every interval at 95 %, as "
        "records decided before sessions looked more than once",
    )
    slower_rule: SlowerRule = Field(
        default=SlowerRule.INTERVAL,
        description="what a slower verdict needed (absent in records decided by the older rule)",
    )
    points: list[PointComparison] = Field(description="one row per point and gated metric")
    unmatched: list[str] = Field(description="candidate points the previous arm did not measure")
    missing: list[str] = Field(
        description="previous-release points or metrics the candidate did not measure"
    )
    not_compared: list[str] = Field(
        description="previous-release points of workloads the candidate's suite does not run"
    )
    failed_requests: dict[str, int] = Field(
        description="candidate points with failed requests, and how many (over its arms)"
    )

    @property
    def failed(self) -> bool:
        """The candidate lost measurements: failed requests, or points it could not measure."""
        return bool(self.missing or self.failed_requests)

    @property
    def gating(self) -> list[PointComparison]:
        """Rows that decide the gate (the others are reported)."""
        return [p for p in self.points if p.gated]

    @property
    def regressions(self) -> list[PointComparison]:
        """Gating rows whose verdict is slower."""
        return [p for p in self.gating if p.verdict is Verdict.SLOWER]

    @property
    def inconclusive(self) -> list[PointComparison]:
        """Gating rows that could not be decided."""
        return [p for p in self.gating if p.verdict is Verdict.INCONCLUSIVE]


def session_order(
    new: Sequence[ArmReport], old: Sequence[ArmReport]
) -> list[tuple[ArmReport, bool]]:
    """Interleave arms as they were run, C1, P1, C2, P2, ..., each with its role."""
    paired = itertools.zip_longest([(arm, True) for arm in new], [(arm, False) for arm in old])
    return [arm for pair in paired for arm in pair if arm is not None]


def _arm_estimate(
    ordered: Sequence[tuple[ArmReport, bool]],
    name: str,
    metric: str,
    *,
    ledger: Sequence[float],
    tolerance_pct: float,
    alphas: tuple[float, float],
    slower_rule: SlowerRule,
) -> ArmEstimate | None:
    arms = []
    for report, candidate in ordered:
        if name not in report.points:
            continue  # an added arm that measured only the undecided points
        values = report.points[name].values(metric)
        if not values or min(values) <= 0:
            return None
        arms.append(Arm(candidate=candidate, values=tuple(values)))
    if len({arm.candidate for arm in arms}) < 2:
        return None
    return estimate_arms(
        arms,
        higher_is_better=higher_is_better(metric),
        ledger_gaps=ledger,
        tolerance_pct=tolerance_pct,
        alpha=alphas[0],
        slower_alpha=alphas[1],
        slower_rule=slower_rule,
    )


class _Pair(NamedTuple):
    """One point and metric of the candidate's first arm beside the previous release's."""

    point: str
    metric: str
    new: Described | None
    old: Described | None
    gated: bool


def _pairs(new: ArmReport, old: ArmReport, policy: GatePolicy, compared: set[str]) -> list[_Pair]:
    """Every metric of every point both first arms have, each side's summary, whether it gates."""
    pairs = []
    for name, point in new.points.items():
        reference = old.points.get(name)
        if reference is None:
            continue
        gated = policy.gated_at(name, compared)
        for metric in dict.fromkeys([*point.gate, *reference.gate]):
            pairs.append(
                _Pair(name, metric, point.summary(metric), reference.summary(metric),
                      metric in gated)
            )  # fmt: skip
    return pairs


def compare_arms(
    new: Sequence[ArmReport],
    old: Sequence[ArmReport],
    *,
    ledger: Ledger | None = None,
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
    policy: GatePolicy | None = None,
    looks: int | None = None,
    slower_rule: SlowerRule = SlowerRule.SIGNIFICANT,
) -> Comparison:
    """Compare candidate arms with previous arms on every point and metric they share.

    `policy` says which metrics gate and at what tolerance (default: the engine-level ones);
    the other rows are decided the same way and reported. `looks` is how many times the session
    this comparison belongs to may compare (`session_looks`). A session that decides at any of
    its looks would, at 95 % per look, err more often than 1 in 20 over all of them, so each
    interval is at Pocock's level for that many looks (`look_alpha`); and since one slower point
    fails the release, a slower verdict must also hold at a level split among the gated rows
    (`slower_alpha`). None keeps every interval at 95 % with no division (records decided so).
    `slower_rule` is what a slower verdict needs (records decided before the current rule pass
    the one they were decided by).

    Raises:
        BenchError: if a side has no arm or the arms share no point.
    """
    if not new or not old:
        raise BenchError("compare needs at least one candidate arm and one previous arm")
    if looks is not None and looks < 1:
        raise BenchError(f"a session looks at least once, got looks={looks}")
    alpha = look_alpha(looks or 1)
    ordered = session_order(new, old)
    rows = []
    unmatched = [name for name in new[0].points if name not in old[0].points]
    # A point of a workload the candidate ran but did not measure is lost; a workload it never
    # ran (another suite, another tool's report) is only reported as not compared.
    ran = {name.partition("/")[0] for name in new[0].points}
    absent = [name for name in old[0].points if name not in new[0].points]
    missing = [name for name in absent if name.partition("/")[0] in ran]
    not_compared = [name for name in absent if name.partition("/")[0] not in ran]
    policy = (policy or GatePolicy()).with_suite(workload_rules(new[0]))
    compared = {m for arm in (new[0], old[0]) for point in arm.points.values() for m in point.gate}
    pairs = _pairs(new[0], old[0], policy, compared)
    gated_rows = sum(pair.gated and None not in (pair.new, pair.old) for pair in pairs)
    strict_alpha = slower_alpha(alpha, gated_rows, looks, slower_rule)
    for name, metric, new_described, old_described, gated in pairs:
        if new_described is None and old_described is not None and gated:
            missing.append(f"{name} {metric}")
        if new_described is None or old_described is None:
            continue
        # The recipe rounds describe() before comparing; so do we, to print its numbers.
        new_summary, old_summary = new_described.rounded(), old_described.rounded()
        higher = higher_is_better(metric)
        welch = difference(new_summary, old_summary)
        gaps = ledger.for_metric(name, metric) if ledger else []
        tolerance = policy.tolerance_at(name, metric, tolerance_pct)
        arms = _arm_estimate(
            ordered, name, metric, ledger=gaps, tolerance_pct=tolerance,
            alphas=(alpha, strict_alpha), slower_rule=slower_rule,
        )  # fmt: skip
        regression = welch is not None and recipe_regression(
            welch, higher_is_better=higher, tolerance_pct=tolerance
        )
        rows.append(
            PointComparison(
                point=name,
                metric=metric,
                higher_is_better=higher,
                new=new_summary,
                old=old_summary,
                welch=welch,
                recipe_verdict=recipe_verdict(welch, higher_is_better=higher) if welch else None,
                recipe_regression=regression,
                arms=arms,
                verdict=arms.verdict if arms else Verdict.INCONCLUSIVE,
                gated=gated,
                # None: the gate's own (records written before rows carried one compare)
                tolerance_pct=None if tolerance == tolerance_pct else tolerance,
            )
        )
    if not rows and not missing:
        raise BenchError("the arms share no point with a gated metric; nothing to compare")
    if rows and not missing and not any(row.gated for row in rows):
        # A gate that gates nothing would pass any release: the policy (release or suite)
        # named metrics no shared point measures, or made every point reported-only.
        raise BenchError(
            "no compared point has a gating metric: the release's gate_metrics or the suite's "
            "workload `gate:` settings name nothing these arms measured"
        )
    return Comparison(
        new=[r.label for r in new],
        old=[r.label for r in old],
        tolerance_pct=tolerance_pct,
        ledger_gaps=len(ledger.sessions) if ledger else 0,
        looks=looks,
        slower_rule=slower_rule,
        points=rows,
        unmatched=unmatched,
        missing=missing,
        not_compared=not_compared,
        failed_requests=_failed_requests(new),
    )


def slower_alpha(alpha: float, gated_rows: int, looks: int | None, rule: SlowerRule) -> float:
    """The two-sided error a slower verdict must also hold at, so that an A/A session is called
    slower at most 1 time in 20 over all its looks and gated rows (Bonferroni over the rows).

    The current rule's claim is one-sided (the interval wholly on the slower side of zero), so a
    two-sided interval at twice the split errs that way at the split itself; the older rule split
    the two-sided error. How often simulated A/A sessions are then called slower is in
    docs/statistics.md (`python -m flows.research.sessions_mc`).
    """
    if looks is None:
        return alpha
    rows = max(1, gated_rows)
    if rule is SlowerRule.SIGNIFICANT:
        return min(alpha, 2 * alpha / rows)
    return alpha / rows


def _failed_requests(arms: Sequence[ArmReport]) -> dict[str, int]:
    """Failed requests per point over the given arms (our receipts and imported ones)."""
    counts: dict[str, int] = {}
    for arm in arms:
        for name, point in arm.points.items():
            failed = sum(not r.ok for s in point.samples for r in s.receipts)
            failed += sum(not r.get("ok", True) for s in point.samples for r in s.legacy_receipts)
            if failed:
                counts[name] = counts.get(name, 0) + failed
    return counts


class SessionDecision(StrEnum):
    """What a benchmark session does after a comparison."""

    PASS = "pass"  # noqa: S105 - a verdict, not a password
    FAIL_SLOWER = "fail-slower"
    FAIL_LOST = "fail-lost-measurements"
    FAIL_INCONCLUSIVE = "fail-inconclusive"
    ADD_PREVIOUS = "add-previous-arm"
    ADD_CANDIDATE = "add-candidate-arm"


def session_decision(comparison: Comparison, arms_run: int, max_arms: int) -> SessionDecision:
    """Decide a session: pass, fail, or run one more arm (alternating roles) while undecided.

    Inconclusive is never a pass: the session adds arms (previous, candidate, ...) until every
    point is decided or `max_arms` is reached, and then fails as inconclusive.
    """
    if comparison.failed:
        return SessionDecision.FAIL_LOST
    if comparison.regressions:
        return SessionDecision.FAIL_SLOWER
    if not comparison.inconclusive:
        return SessionDecision.PASS
    if arms_run >= max_arms:
        return SessionDecision.FAIL_INCONCLUSIVE
    candidates, previous = len(comparison.new), len(comparison.old)
    return SessionDecision.ADD_PREVIOUS if candidates > previous else SessionDecision.ADD_CANDIDATE
