"""Your cluster against a published one: host facts side by side, per-step numbers, and what a
comparison across clusters can and cannot say.

The recipe's release thread answers "why is my single stream slower?" by asking whether the
user's cluster completes fewer engine steps per second, and for the host facts that would explain
it (kernel, driver, memory-saver, APST, clocks, fabric counters). So beside the point-by-point
comparison, this puts each side's host facts and its per-step numbers (engine step or CPU time per
step, time per output token). Pure: the command renders what `cross_cluster` returns.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from flows.bench.compare import Comparison
from flows.bench.hosts import NOT_RECORDED, FactRow, HostFacts, side_by_side
from flows.bench.report import ArmReport
from flows.bench.stats import Change

PER_STEP = (
    "engine_cpu_ms",
    "engine_step_ms",
    "engine_tpot_ms",
    "step_ms",
    "step_geomean_ms",
    "tpot_p50_ms",
    "tpot_ms",
)
"""Metrics that measure one step (or one output token): a cluster that spends more per step is
slower whatever the workload's text, so these say "it is the cluster" more plainly than tok/s."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class StepRow(BaseModel):
    """One per-step metric of one point on both sides, with the within-arm (Welch) change."""

    model_config = _FROZEN

    point: str
    metric: str
    new_mean: float
    old_mean: float
    welch: Change | None = Field(description="the first arms' Welch change; None if n < 2")


class CrossCluster(BaseModel):
    """What `bench compare` adds when a side carries host facts."""

    model_config = _FROZEN

    new_title: str = Field(description="the new side: its cluster and where its facts come from")
    old_title: str = Field(description="the old side, the same way")
    new_measured: str = Field(description="the new side's release and suite")
    old_measured: str = Field(description="the old side's release and suite")
    facts: list[FactRow]
    steps: list[StepRow]
    caveats: list[str]


def _facts(arms: Sequence[ArmReport]) -> HostFacts | None:
    return next((arm.host_facts for arm in arms if arm.host_facts is not None), None)


def _title(arms: Sequence[ArmReport], facts: HostFacts | None) -> str:
    label = arms[0].label if arms else "?"
    if facts is None:
        return f"{label} (host facts {NOT_RECORDED})"
    return f"{label}: {facts.cluster} ({facts.source})"


def release_of(arm: ArmReport) -> str | None:
    """The release an arm measured, where it says: a gate's arm names it, a recipe report
    names its image; `bench run` knows only the endpoint, so None."""
    for key in ("release", "image"):
        value = arm.identity.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _what(arms: Sequence[ArmReport]) -> str:
    release = release_of(arms[0]) if arms else None
    suite = arms[0].suite if arms else "?"
    return f"release {release or 'not named'}, suite {suite}"


def caveats(new: Sequence[ArmReport], old: Sequence[ArmReport], ledger_gaps: int) -> list[str]:
    """What this comparison cannot prove, said plainly beside it."""
    releases = {release_of(arm) for arm in (*new[:1], *old[:1])}
    lines = []
    if None in releases:
        lines.append(
            "A side does not name the release it ran: a gap per step is the cluster's only if "
            "both ran the same release, model and engine settings."
        )
    elif len(releases) > 1:
        lines.append(
            f"The sides ran different releases ({'; '.join(sorted(map(str, releases)))}): a "
            "gap per step may be the release's, not the cluster's."
        )
    lines += [
        (
            f"{len(new)} arm(s) on this side, {len(old)} on the other, measured in different "
            "sessions: the Welch interval is each arm's own scatter only; boot-to-boot and "
            "session-to-session noise are not in it, and neither is any difference of "
            "workload, client or network between the two places."
        ),
    ]
    lines.append(
        "No A/A ledger covers the other cluster, so no verdict here can tell a slower "
        "cluster from a slower session: the arm-level verdicts stay inconclusive unless "
        "several arms per side say otherwise."
        if ledger_gaps == 0
        else f"The A/A ledger given ({ledger_gaps} sessions) holds the boot noise of the "
        "sessions it was measured in, not the gap between two clusters: its verdicts say how "
        "far apart these arms are, not why."
    )
    lines.append(
        "For scale: in the recipe's release thread (r6x post, Oct 18-19) one session on one "
        "cluster gave single-stream tok/s changes of +4.6 % ±2.9 (TP4) and +4.7 % ±4.6 (TP3), "
        "but decode step time -2.5 % ±0.15 and -1.3 % ±0.14: a gap in tok/s within a few "
        "percent says little; a gap per step well beyond its interval, with the host facts "
        "that differ, is where to look."
    )
    return lines


def cross_cluster(
    comparison: Comparison, new: Sequence[ArmReport], old: Sequence[ArmReport]
) -> CrossCluster | None:
    """Host facts of both sides, per-step rows and caveats; None when neither side has facts
    (a session of one cluster, compared the usual way)."""
    new_facts, old_facts = _facts(new), _facts(old)
    if new_facts is None and old_facts is None:
        return None
    steps = [
        StepRow(
            point=row.point,
            metric=row.metric,
            new_mean=row.new.mean,
            old_mean=row.old.mean,
            welch=row.welch,
        )
        for row in comparison.points
        if row.metric in PER_STEP
    ]
    return CrossCluster(
        new_title=_title(new, new_facts),
        old_title=_title(old, old_facts),
        new_measured=_what(new),
        old_measured=_what(old),
        facts=side_by_side(new_facts, old_facts),
        steps=steps,
        caveats=caveats(new, old, comparison.ledger_gaps),
    )


def step_line(row: StepRow) -> str:
    """`single/c1 engine_cpu_ms: 1.234 here, 1.100 there, +12.2 % [+10.1, +14.3]: this side
    spends more per step` (the side, not the cluster: the release may differ too)."""
    change = (
        f"{row.welch.pct:+.1f} % [{row.welch.low:+.1f}, {row.welch.high:+.1f}]"
        if row.welch
        else "no interval (n < 2)"
    )
    more = ""
    if row.welch and row.welch.low > 0:
        more = ": this side spends more per step"
    elif row.welch and row.welch.high < 0:
        more = ": this side spends less per step"
    return (
        f"  {row.point} {row.metric}: {row.new_mean:.3f} here, {row.old_mean:.3f} there, "
        f"{change}{more}"
    )
