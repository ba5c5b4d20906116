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

from flows.bench.compare import SessionDecision, slower_alpha
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


def gates_cell(point: PointRow) -> str:
    """Whether a row decides the gate (`gates`) or is only shown (`reported`), in every table."""
    return "gates" if point.gated else "reported"


def bench_rows(summary: BenchmarkSummary) -> list[Row]:
    """workload | previous | candidate (change [interval]) | verdict | gates, like the recipe's
    notes, with each row marked as gating or only reported.

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
                gates_cell(point),
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


def disturbed_line(summary: BenchmarkSummary) -> str:
    """e.g. `Measured again (a host crossed a probe limit; kept under arms/): arm 2 (previous,
    2-previous-disturbed-1: local1 gpu temperature.gpu 91 (above max 85) at 40s).`"""
    parts = [
        f"arm {arm.index} ({arm.role}, {arm.folder}: {'; '.join(arm.reasons)})"
        for arm in summary.disturbed
    ]
    return (
        "Measured again (a host crossed a probe limit; kept under arms/): " + ", ".join(parts) + "."
    )


def cross_session_line(summary: BenchmarkSummary) -> str:
    """The rule an irreversible host change was decided by, its width and where its previous
    arms came from."""
    cross = summary.cross_session
    if cross is None:
        return ""
    return (
        f"Compared across sessions (the hosts changed irreversibly): the previous release's "
        f"{len(cross.recorded_arms)} arms of record `{cross.record}` (kept under arms/recorded-*); "
        f"{cross.rule}: {cross.allowance_pct:g} % on each side."
    )


_COUNT_ORDER = ("slower", "inconclusive", "faster", "level")


def rows_tolerance(rows: list[PointRow], gate_tolerance: float) -> str:
    """The tolerance the rows were decided at: one value ("15%"), or their range ("3-15%") when
    a suite or a metric set some of them apart from the gate's."""
    values = sorted(
        {row.tolerance_pct if row.tolerance_pct is not None else tolerance_pct(gate_tolerance)
         for row in rows}
    )  # fmt: skip
    if not values:
        return f"{tolerance_pct(gate_tolerance):g}%"
    return f"{values[0]:g}%" if len(values) == 1 else f"{values[0]:g}-{values[-1]:g}%"


def bench_headline(summary: BenchmarkSummary) -> str:
    """The benchmark's one headline, from the gated rows only: how many gate, at which
    tolerance, their verdicts, the row that decided (a failing one first, else the largest
    change) and how many rows are only reported. The board, `records`, `show`, `--brief`,
    `compare`, the README and the run's artifact all print this line, e.g.
    `4 gated at 3%: 3 faster, 1 level; largest prefill/512 prefill_tps +12.0% [+10.1, +13.9]
    faster; 26 reported, not gated`.
    """
    if not summary.points:
        return "no points"
    gated = [point for point in summary.points if point.gated]
    reported = len(summary.points) - len(gated)
    tail = f"; {reported} reported, not gated" if reported else ""
    if not gated:
        return f"no gated rows{tail}"
    counts = dict.fromkeys(_COUNT_ORDER, 0)
    for point in gated:
        counts[point.verdict] = counts.get(point.verdict, 0) + 1
    shown = ", ".join(f"{n} {verdict}" for verdict, n in counts.items() if n)
    text = f"{len(gated)} gated at {rows_tolerance(gated, summary.tolerance)}: {shown}"
    deciding = headline_changes(summary, 1)
    if deciding:
        failing = any(point.verdict in _FIRST for point in gated)
        # the row without the colon after its metric; a combined suite's point keeps its own
        text += f"; {'decided by' if failing else 'largest'} {deciding[0].replace(': ', ' ', 1)}"
    return text + tail


BENCH_OUTCOMES = ("faster", "level", "slower", "inconclusive", "lost")
"""What a benchmark found, in one word: faster or level passed (some gated row surely faster, or
none), slower failed, inconclusive waits for a person, lost: the candidate lost measurements."""


def bench_outcome(summary: BenchmarkSummary) -> str:
    """The benchmark's outcome in one word (`BENCH_OUTCOMES`), from its session decision and
    gated rows (records without a decision are read from their rows alone)."""
    gated = {point.verdict for point in summary.points if point.gated}
    decision = summary.decision
    if decision == SessionDecision.FAIL_LOST.value:
        return "lost"
    if decision == SessionDecision.FAIL_SLOWER.value or "slower" in gated:
        return "slower"
    if decision == SessionDecision.FAIL_INCONCLUSIVE.value or "inconclusive" in gated:
        return "inconclusive"
    return "faster" if "faster" in gated else "level"


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
    undecided = SessionDecision.FAIL_INCONCLUSIVE.value
    if outcome == "inconclusive" and summary.decision not in (None, undecided):
        problems.append(
            f"benchmark: outcome inconclusive, but the session decided {summary.decision!r}"
        )
    return problems


def section(summary: BenchmarkSummary, record: RecordView) -> list[str]:
    """The README section: the headline, arms, tolerance, the results table, KV capacity, the
    plot."""
    tolerance = rows_tolerance([p for p in summary.points if p.gated], summary.tolerance)
    lines = [
        "",
        f"Headline: {bench_headline(summary)}.",
        "",
        (
            f"Arms in session order: {', '.join(summary.arms)}; tolerance "
            f"{tolerance}. A change counts (bold) only when the verdict says so: faster "
            "(the whole 95% interval on the good side of no change) or slower "
            f"({_SLOWER_MEANS[summary.slower_rule]}); otherwise the point reads level or "
            "inconclusive."
        ),
        "",
        *markdown_table(
            ["workload", "previous", "candidate (change [95% interval])", "verdict", "gated"],
            bench_rows(summary),
        ),
    ]
    if summary.kv_capacity_tokens:
        lines += ["", kv_capacity_line(summary.kv_capacity_tokens)]
    if summary.disturbed:
        lines += ["", disturbed_line(summary)]
    if summary.cross_session is not None:
        lines += ["", cross_session_line(summary)]
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
        f"{interval(point.low, point.high)}, {point.verdict}, {gates_cell(point)})"
    )


def _headline_of(record: RecordView) -> str:
    summary = record.summary_of(BenchmarkSummary)
    return bench_headline(summary) if summary is not None else DASH


def compare(first: RecordView, second: RecordView) -> Section:
    """The headline, then each point's candidate figure, change, verdict and gating in both."""
    title, header, rows = side_by_side(
        "benchmark: candidate (change [interval], verdict, gates or reported)",
        "point",
        (first, second),
        _points,
        _point,
    )
    return title, header, [["headline", _headline_of(first), _headline_of(second)], *rows]


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
            f"{len(summary.arms)} arms; {bench_headline(summary)}"
        )
        lines.append(f"  {which} gated changes [95% interval]:")
        lines.extend(f"    {line}" for line in headline_changes(summary))
    return lines


def _bench_points(summary: BenchmarkSummary) -> list[PointRow]:
    """The gated rows that have an interval: what the plot shows against the tolerance band."""
    return [
        p
        for p in summary.points
        if p.gated and p.change is not None and p.low is not None and p.high is not None
    ]


AXIS_CAP_PCT = 1000.0
"""The plot's axis ends here: an interval running further (a session that never settled) ends
in an arrow with its bound written beside, instead of stretching the axis for every row."""
BAND_TOLERANCES = 5
"""The axis reaches at least this many tolerances either side, so the band always shows."""


def plot_limit(points: list[PointRow], tolerance: float) -> float:
    """Half the plot's x range: past every interval shown, at least a few tolerances, at most
    `AXIS_CAP_PCT`."""
    widest = max((max(abs(p.low or 0.0), abs(p.high or 0.0)) for p in points), default=0.0)
    return min(max(BAND_TOLERANCES * tolerance, 1.15 * widest), AXIS_CAP_PCT)


def plot_benchmark(summary: BenchmarkSummary, path: Path) -> Path:
    """The gated rows' changes (percent) with their 95 % intervals against the tolerance band.

    The axis is symmetric-log (linear within the tolerance, logarithmic beyond), so a row a
    few percent off and one a hundred percent off both read, and the band keeps its width;
    it is clipped at `plot_limit`, where a longer interval ends in an arrow with its bound.
    """
    plt = pyplot()
    points = _bench_points(summary)
    tol = tolerance_pct(summary.tolerance)
    limit = plot_limit(points, tol)
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(points) + 2.0))
    ax.set_xscale("symlog", linthresh=max(tol, 0.1))
    ax.axvspan(-tol, tol, color="grey", alpha=0.2, label=f"±{tol:g}% tolerance")
    ax.axvline(0, color="black", linewidth=0.8)
    seen: set[str] = set()
    for y, point in enumerate(points):
        center, low, high = float(point.change or 0), float(point.low or 0), float(point.high or 0)
        color = _COLORS.get(point.verdict, "orange")
        center = min(max(center, -limit), limit)
        shown_low, shown_high = max(low, -limit), min(high, limit)
        label = point.verdict if point.verdict not in seen else None
        seen.add(point.verdict)
        ax.errorbar(center, y, xerr=[[center - shown_low], [shown_high - center]], fmt="o",
                    color=color, label=label)  # fmt: skip
        for bound, clipped, mark, align in ((low, low < -limit, "<", "left"),
                                            (high, high > limit, ">", "right")):  # fmt: skip
            if clipped:
                edge = -limit if mark == "<" else limit
                ax.plot(edge, y, marker=mark, color=color)
                ax.annotate(f"{bound:+,.0f}%", (edge, y), xytext=(0, 6),
                            textcoords="offset points", ha=align, fontsize=6)  # fmt: skip
    ax.set_xlim(-limit, limit)
    marks = sorted(
        {0.0, *(sign * v for v in (tol, 10, 100, 1000) if v <= limit for sign in (1, -1))}
    )
    ax.set_xticks(marks, [f"{v:+g}%" if v else "0" for v in marks], fontsize=7)
    ax.minorticks_off()
    labels = [f"{p.point} {p.unit}" for p in points]
    ax.set_yticks(range(len(points)), labels, fontsize=7)
    ax.set_ylim(len(points) - 0.5, -0.5)
    ax.set_xlabel("candidate change against previous, % (95% interval; symmetric log axis)")
    ax.set_title(f"benchmark, gated rows: {bench_headline(summary).split(';')[0]}", fontsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    return save(plt, fig, path)


@dataclass(frozen=True)
class BenchmarkStory:
    """The benchmark gate as the record tells it."""

    heading: str = "Benchmark: candidate against previous"
    short: str = "bench"

    def headline(self, summary: BaseModel) -> str:
        """The one benchmark headline (`bench_headline`), from the gated rows."""
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
        """The gated rows' changes with their intervals, when some gated row has one."""
        if not isinstance(summary, BenchmarkSummary) or not _bench_points(summary):
            return []
        return [plot_benchmark(summary, folder / "benchmark.png")]

    def found(self, summary: BaseModel) -> str:
        """faster, level, slower, inconclusive or lost (`bench_outcome`)."""
        return bench_outcome(summary) if isinstance(summary, BenchmarkSummary) else ""

    def leading(self, summary: BaseModel) -> list[str]:
        """The gated rows that decided, then the largest changes, with their 95 % intervals."""
        if not isinstance(summary, BenchmarkSummary):
            return []
        changes = headline_changes(summary)
        if not changes:
            return []
        return ["Largest gated changes [95% interval]:", "", *(f"- {line}" for line in changes)]

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
