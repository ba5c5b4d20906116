"""The benchmark gate in a record: results table, verdict checks, compare rows, plot and brief.

Pure text from the typed summary, except `plots` (each point's change with its interval) and
`recompute` (flows.gates.benchmark.recompute: the comparison again from the raw arms).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from flows.bench.compare import slower_alpha
from flows.bench.stats import SlowerRule, Verdict, look_alpha, non_inferiority
from flows.gates.benchmark.recompute import benchmark_problems
from flows.gates.benchmark.summary import BenchmarkSummary, CalibrationSummary, PointRow
from flows.gates.markdown import DASH, Row, interval, markdown_table, number, signed_pct
from flows.gates.plotting import pyplot, save
from flows.gates.story import Earlier, RecordView, Section, StageView, plot_link, side_by_side

COUNTING = ("faster", "slower")
HEADLINES = 3
_FIRST = {"slower": 0, "inconclusive": 1}
"""Verdicts that fail a session, listed before the largest changes."""
_COLORS = {"slower": "red", "faster": "green", "level": "tab:blue"}
_SLOWER_MEANS = {
    SlowerRule.INTERVAL: "the whole interval beyond the tolerance",
    SlowerRule.SIGNIFICANT: "the whole interval on the bad side of no change and the change "
    "beyond the tolerance",
}
"""What a slower verdict meant, by the rule the record was decided by (older records keep
their words, so their README renders again byte for byte)."""


def tolerance_pct(value: Any) -> float:
    """The benchmark tolerance in percent; summaries store it as the release does (0.03 = 3 %).

    A value of 1 or more is read as already in percent, so either convention renders alike.
    """
    tolerance = float(value)
    return tolerance * 100 if tolerance < 1 else tolerance


def bench_verdicts(point: PointRow, tolerance: float, summary: BenchmarkSummary) -> set[str]:
    """The verdicts one point's interval allows, recomputed by the rule it was decided by.

    A slower reading of the shown interval may have stayed inconclusive: when the session's
    split among its gated rows (`slower_alpha`) was stricter than the shown interval's level, a
    slower verdict also had to hold there, and the summary does not keep that interval.
    """
    if point.low is None or point.high is None or point.change is None:
        return {Verdict.INCONCLUSIVE.value}
    verdict = non_inferiority(
        float(point.low),
        float(point.high),
        change_pct=float(point.change),
        higher_is_better=point.higher_is_better,
        tolerance_pct=tolerance_pct(tolerance),
        rule=summary.slower_rule,
    )
    if verdict is Verdict.SLOWER and _slower_held_stricter(summary):
        return {verdict.value, Verdict.INCONCLUSIVE.value}
    return {verdict.value}


def _slower_held_stricter(summary: BenchmarkSummary) -> bool:
    """Whether the session held slower verdicts at a stricter level than the intervals shown."""
    if summary.looks is None:
        return False  # every interval at 95 %, no split (records decided so)
    alpha = look_alpha(summary.looks)
    rows = sum(point.gated for point in summary.points)
    return slower_alpha(alpha, rows, summary.looks, summary.slower_rule) < alpha


def bench_rows(summary: BenchmarkSummary) -> list[Row]:
    """workload | previous | candidate (change [interval]) | verdict, like the recipe's notes.

    The change is shown as counting (bold) only when the verdict is faster or slower; a level or
    inconclusive point names its verdict instead, with the interval that decided it.
    """
    rows: list[Row] = []
    for point in summary.points:
        span = interval(point.low, point.high)
        if point.verdict in COUNTING:
            detail = f"**{signed_pct(point.change)}** {span}"
        else:
            detail = f"{point.verdict}: {signed_pct(point.change)} {span}"
        candidate = f"{number(point.candidate)} ({detail})"
        direction = "higher is better" if point.higher_is_better else "lower is better"
        rows.append(
            [
                f"{point.point} ({point.unit}, {direction})",
                number(point.previous),
                candidate,
                point.verdict,
            ]
        )
    return rows


def kv_capacity_line(capacity: Mapping[str, float]) -> str:
    """e.g. `KV cache capacity (engine-reported, not gated): previous 1,048,576 tokens,
    candidate 983,040 tokens (-6.2%).`"""
    parts = [f"{role} {capacity[role]:,.0f} tokens" for role in ("previous", "candidate")
             if role in capacity]  # fmt: skip
    text = "KV cache capacity (engine-reported, not gated): " + ", ".join(parts)
    if capacity.get("previous") and "candidate" in capacity:
        text += f" ({100 * (capacity['candidate'] / capacity['previous'] - 1):+.1f}%)"
    return text + "."


def bench_headline(summary: BenchmarkSummary) -> str:
    """e.g. `2 faster, 3 level; best decode/prose-c1 +12.0%`."""
    points = summary.points
    if not points:
        return "no points"
    counts: dict[str, int] = {}
    for point in points:
        counts[point.verdict] = counts.get(point.verdict, 0) + 1
    text = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
    counting = [p for p in points if p.verdict in COUNTING and p.change is not None]
    if counting:
        top = max(counting, key=lambda p: abs(float(p.change or 0.0)))
        name = f"{top.point} {top.unit}".strip()
        text += f"; {top.verdict} {name} {signed_pct(top.change)}"
    return text


def bench_problems(summary: BenchmarkSummary, outcome: str) -> list[str]:
    """Verdicts that do not follow from their intervals, and an outcome that does not follow."""
    problems: list[str] = []
    tolerance = summary.tolerance
    failing: list[str] = []
    for point in summary.points:
        # A row decided at its own tolerance (a metric's or a suite workload's) is checked
        # at that tolerance; a reported row never fails the outcome.
        own = tolerance if point.tolerance_pct is None else point.tolerance_pct / 100
        allowed = bench_verdicts(point, own, summary)
        if point.verdict not in allowed:
            problems.append(
                f"benchmark: {point.point}: verdict {point.verdict!r}, but its "
                f"interval {interval(point.low, point.high)} at tolerance "
                f"{tolerance_pct(own):g}% gives {' or '.join(map(repr, sorted(allowed)))}"
            )
        if point.gated and not any(Verdict(verdict).passes for verdict in allowed):
            failing.append(point.point)
    if outcome == "passed" and failing:
        problems.append(f"benchmark: outcome passed, but points do not pass: {', '.join(failing)}")
    return problems


def section(summary: BenchmarkSummary, record: RecordView) -> list[str]:
    """The README section: arms, tolerance, the results table, KV capacity, the plot."""
    tolerance = tolerance_pct(summary.tolerance)
    lines = [
        "",
        (
            f"Arms in session order: {', '.join(summary.arms)}; tolerance "
            f"{tolerance:g}%. A change counts (bold) only when the verdict says so: faster "
            "(the whole 95% interval on the good side of no change) or slower "
            f"({_SLOWER_MEANS[summary.slower_rule]}); otherwise the point reads level or "
            "inconclusive."
        ),
        "",
        *markdown_table(
            ["workload", "previous", "candidate (change [95% interval])", "verdict"],
            bench_rows(summary),
        ),
    ]
    if summary.kv_capacity_tokens:
        lines += ["", kv_capacity_line(summary.kv_capacity_tokens)]
    return lines + plot_link(record, "benchmark")


def _points(record: RecordView) -> dict[str, PointRow]:
    """Benchmark rows by point and metric (a point may gate several metrics)."""
    summary = record.summary_of(BenchmarkSummary)
    points = summary.points if summary is not None else []
    return {f"{p.point} {p.unit}".strip(): p for p in points}


def _point(point: PointRow | None) -> str:
    if point is None:
        return DASH
    return (
        f"{number(point.candidate)} ({signed_pct(point.change)} "
        f"{interval(point.low, point.high)}, {point.verdict})"
    )


def compare(first: RecordView, second: RecordView) -> Section:
    """Each point's candidate figure, change and verdict in both records."""
    return side_by_side(
        "benchmark: candidate (change [interval], verdict)",
        "point",
        (first, second),
        _points,
        _point,
    )


def _interval(row: PointRow) -> str:
    if row.low is None or row.high is None:
        return "no interval"
    return f"[{row.low:+.1f}, {row.high:+.1f}]"


def headline_changes(summary: BenchmarkSummary, count: int = HEADLINES) -> list[str]:
    """The gated rows that decided the outcome, then the largest changes, as
    `point metric: change [interval] verdict`: a failed session names its slower or undecided
    rows first, so the lines say why.

    Shared by `records --brief` and the paused run's description, so both name the same rows.
    """
    rows = [row for row in summary.points if row.gated and row.change is not None]
    rows.sort(key=lambda row: (_FIRST.get(row.verdict, 2), -abs(row.change or 0.0)))
    return [
        f"{row.point} {row.unit}: {row.change:+.1f}% {_interval(row)} {row.verdict}"
        for row in rows[:count]
    ]


def brief(newest: RecordView | None, calibration: RecordView | None) -> list[str]:
    """The calibration's boot noise, then the newest qualification's gated changes."""
    lines: list[str] = []
    measured = calibration.summary_of(CalibrationSummary) if calibration is not None else None
    if calibration is not None and measured is not None:
        noise = measured.boot_noise_pct
        engine = {k: v for k, v in noise.items() if k.endswith(":engine_cpu_ms")}
        shown = engine or noise
        worst = max(shown.values()) if shown else 0.0
        lines.append(
            f"calibration: {measured.gaps} A/A gaps of {calibration.release_name} "
            f"({measured.suite}); boot noise SD up to {worst:.2f}% "
            f"{'in engine CPU time per step' if engine else 'over every metric'}"
        )
    summary = newest.summary_of(BenchmarkSummary) if newest is not None else None
    if newest is not None and summary is not None and summary.points:
        which = "largest" if summary.decision == "pass" else "failing rows first, then largest"
        lines.append(
            f"{newest.release_name} vs {newest.previous}: {summary.decision} after "
            f"{len(summary.arms)} arms; {which} gated changes [95% interval]:"
        )
        lines.extend(f"    {line}" for line in headline_changes(summary))
    return lines


def _bench_points(summary: BenchmarkSummary) -> list[PointRow]:
    return [
        p
        for p in summary.points
        if p.change is not None and p.low is not None and p.high is not None
    ]


def plot_benchmark(summary: BenchmarkSummary, path: Path) -> Path:
    """Each point's change (percent) with its 95 % interval and the tolerance band."""
    plt = pyplot()
    points = _bench_points(summary)
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(points) + 1.5))
    for y, point in enumerate(points):
        center, low, high = float(point.change or 0), float(point.low or 0), float(point.high or 0)
        color = _COLORS.get(point.verdict, "orange")
        ax.errorbar(center, y, xerr=[[center - low], [high - center]], fmt="o", color=color)
    tol = tolerance_pct(summary.tolerance)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.axvspan(-tol, tol, color="grey", alpha=0.15, label=f"±{tol:g}% tolerance")
    labels = [f"{p.point} {p.unit}" for p in points]
    ax.set_yticks(range(len(points)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("candidate change against previous, % (95% interval)")
    ax.legend(loc="lower right", fontsize=7)
    return save(plt, fig, path)


@dataclass(frozen=True)
class BenchmarkStory:
    """The benchmark gate as the record tells it."""

    heading: str = "Benchmark: candidate against previous"
    short: str = "bench"

    def headline(self, summary: BaseModel) -> str:
        """e.g. `2 faster, 3 level; best decode/prose-c1 +12.0%`."""
        return bench_headline(summary) if isinstance(summary, BenchmarkSummary) else ""

    def problems(self, summary: BaseModel, outcome: str) -> list[str]:
        """Verdicts that do not follow from their intervals, an outcome that does not follow."""
        return bench_problems(summary, outcome) if isinstance(summary, BenchmarkSummary) else []

    def section(self, summary: BaseModel, record: RecordView) -> list[str]:
        """The results table."""
        return section(summary, record) if isinstance(summary, BenchmarkSummary) else []

    def compare(self, first: RecordView, second: RecordView) -> Section | None:
        """Each point in both records."""
        return compare(first, second)

    def brief(self, newest: RecordView | None, calibration: RecordView | None) -> list[str]:
        """Boot noise and the newest gated changes."""
        return brief(newest, calibration)

    def plots(self, summary: BaseModel, folder: Path) -> list[Path]:
        """Each point's change with its interval, when some point has one."""
        if not isinstance(summary, BenchmarkSummary) or not _bench_points(summary):
            return []
        return [plot_benchmark(summary, folder / "benchmark.png")]

    def recompute(self, record: RecordView, stage: StageView, previous: Earlier) -> list[str]:
        """The comparison and decision again from the raw arms (a skipped stage has none)."""
        del previous
        summary = stage.summary
        if not isinstance(summary, BenchmarkSummary) or stage.outcome == "skipped":
            return []
        if record.folder is None:
            return []
        return benchmark_problems(record.folder / stage.stage, summary, max_arms(record))


def max_arms(record: RecordView) -> int:
    """The benchmark's arm limit from the resolved release (the decision depends on it)."""
    gates = record.release.get("gates") or {}
    value = (gates.get("benchmark") or {}).get("max_arms", 7)
    return int(value) if isinstance(value, int) else 7


BENCHMARK_STORY = BenchmarkStory()
