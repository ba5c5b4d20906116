"""Pure readings of each gate's summary: table rows, headline numbers and consistency checks.

The README, the index, `sparkgate records` and `verify` all read the gates' typed summaries
through this module, so a number is formatted and a verdict is recomputed in exactly one place.
Nothing here touches files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from flows.bench.compare import slower_alpha
from flows.bench.stats import Verdict, look_alpha, non_inferiority
from flows.gates.benchmark.summary import BenchmarkSummary, PointRow
from flows.gates.cold_boots.summary import BootRow, ColdBootsSummary
from flows.gates.determinism.summary import DeterminismSummary
from flows.gates.release_tests.summary import ReleaseTestsSummary

Row = list[str]
DASH = "—"
COUNTING = ("faster", "slower")


def number(value: Any, unit: str = "") -> str:
    """A figure with sensible decimals (198.6, 38.21, 0.512), or a dash when absent."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return DASH
    size = abs(value)
    decimals = 0 if isinstance(value, int) else 1 if size >= 100 else 2 if size >= 1 else 3
    text = f"{value:,.{decimals}f}"
    return f"{text} {unit}".rstrip() if unit else text


def signed_pct(value: Any) -> str:
    """A percent change with its sign, e.g. +16.0%."""
    return f"{value:+.1f}%" if isinstance(value, int | float) else DASH


def interval(low: Any, high: Any) -> str:
    """A 95 % interval in percent, e.g. [+6.9, +25.1]."""
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        return "[no interval]"
    return f"[{low:+.1f}, {high:+.1f}]"


def tolerance_pct(value: Any) -> float:
    """The benchmark tolerance in percent; summaries store it as the release does (0.03 = 3 %).

    A value of 1 or more is read as already in percent, so either convention renders alike.
    """
    tolerance = float(value)
    return tolerance * 100 if tolerance < 1 else tolerance


# --- benchmark ---------------------------------------------------------------------------------


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


# --- cold boots --------------------------------------------------------------------------------


def boot_rows(summary: ColdBootsSummary) -> list[Row]:
    """boot | ready | what happened, as the recipe's boot tables read."""
    return [[boot.mode, number(boot.ready_s, "s"), boot.what_happened] for boot in summary.boots]


def boot_detail_rows(summary: ColdBootsSummary) -> list[Row]:
    """Per boot: slowest preparation, kernels compiled/cached, liveness wait, compiles, check."""
    return [
        [
            boot.mode,
            number(boot.prepare_s_max, "s"),
            (f"{boot.kernels} ({boot.compiled} compiled, {boot.cached} cached)"),
            number(boot.liveness_wait_s_max, "s"),
            str(boot.compiles_after_preparation),
            boot.spot_check,
        ]
        for boot in summary.boots
    ]


def boot_failures(boot: BootRow) -> list[str]:
    """Why one boot fails the gate: no ready time, compiles after preparation, a changed output."""
    reasons: list[str] = [f"error: {boot.error}"] if boot.error else []
    if boot.passed is False:
        reasons.append("marked failed by the gate")
    if boot.ready_s is None:
        reasons.append("never ready")
    if boot.compiles_after_preparation != 0:
        reasons.append(f"{boot.compiles_after_preparation} compiles after preparation")
    if boot.spot_check != "identical":
        reasons.append(f"spot check {boot.spot_check}")
    return reasons


def boots_headline(summary: ColdBootsSummary) -> str:
    """e.g. `4 boots, ready 3.1-9.8 s, 0 compiles after preparation`."""
    boots = summary.boots
    ready = [float(b.ready_s) for b in boots if b.ready_s is not None]
    compiles = sum(b.compiles_after_preparation for b in boots)
    span = f"ready {min(ready):.1f}-{max(ready):.1f} s" if ready else "never ready"
    return f"{len(boots)} boots, {span}, {compiles} compiles after preparation"


def boots_problems(summary: ColdBootsSummary, outcome: str) -> list[str]:
    """An outcome of passed while some boot shows a failure."""
    if outcome != "passed":
        return []
    return [
        f"cold_boots: outcome passed, but boot {boot.mode}: {'; '.join(reasons)}"
        for boot in summary.boots
        if (reasons := boot_failures(boot))
    ]


# --- determinism -------------------------------------------------------------------------------


def determinism_rows(summary: DeterminismSummary) -> list[Row]:
    """scenario | identical | first difference."""
    rows: list[Row] = []
    for scenario in summary.scenarios:
        first = scenario.first_difference
        where = f"prompt {first.prompt}, token {first.index}" if first is not None else DASH
        total = scenario.identical + scenario.differing
        rows.append([scenario.name, f"{scenario.identical}/{total}", where])
    return rows


def against_previous_line(summary: DeterminismSummary, previous: str | None) -> str:
    """One sentence on how the outputs compare with the previous release."""
    against = summary.against_previous
    if against is None:
        return "No comparison with a previous release: none."
    name = previous or "the previous release"
    if against.mode == "unchanged":
        return (
            f"Against {name} (outputs declared unchanged): {against.identical}/{against.total} "
            "responses identical, tokens and logprobs."
        )
    if against.mode == "changed":
        agreement = against.top_token_agreement
        share = f"{agreement * 100:.1f}%" if agreement is not None else DASH
        return (
            f"Against {name} (outputs declared changed): {against.identical}/{against.total} "
            f"responses identical, top-token agreement {share}; {against.reason}"
        )
    return f"No comparison with a previous release: {against.reason}."


def determinism_headline(summary: DeterminismSummary) -> str:
    """e.g. `6/6 scenarios identical; vs previous 9/9`."""
    scenarios = summary.scenarios
    clean = sum(1 for s in scenarios if not s.differing)
    text = f"{clean}/{len(scenarios)} scenarios identical"
    against = summary.against_previous
    if against is not None and against.mode in ("unchanged", "changed"):
        text += f"; vs previous {against.identical}/{against.total}"
    return text


def determinism_problems(summary: DeterminismSummary, outcome: str) -> list[str]:
    """Scenarios that contradict themselves, and a pass that the figures do not allow."""
    problems: list[str] = []
    for scenario in summary.scenarios:
        name, differing = scenario.name, scenario.differing
        if bool(differing) != (scenario.first_difference is not None):
            problems.append(f"determinism: {name}: differing and first difference disagree")
        if differing and outcome == "passed":
            problems.append(f"determinism: outcome passed, but {name} has {differing} differing")
    against = summary.against_previous
    if (
        against is not None
        and against.mode == "unchanged"
        and against.identical != against.total
        and outcome == "passed"
    ):
        problems.append("determinism: outcome passed, but outputs differ from the previous")
    return problems


def hash_matches(hashes: Mapping[str, Any], previous_hashes: Mapping[str, Any]) -> tuple[int, int]:
    """(identical, total) over this record's prompts, as the determinism gate counts them.

    A prompt is identical when the previous record has it with the same token and logprob
    hashes; a prompt the previous record lacks counts as differing.
    """
    identical = 0
    for prompt, digest in hashes.items():
        before = previous_hashes.get(prompt)
        if (
            isinstance(before, Mapping)
            and isinstance(digest, Mapping)
            and before.get("tokens") == digest.get("tokens")
            and before.get("logprobs") == digest.get("logprobs")
        ):
            identical += 1
    return identical, len(hashes)


# --- release tests -----------------------------------------------------------------------------

TEST_COUNTS = ("passed", "failed", "errors", "skipped")


def tests_line(summary: ReleaseTestsSummary) -> str:
    """e.g. `41 passed, 0 failed, 0 errors, 2 skipped in 12.3 s on spark1`."""
    counts = ", ".join(f"{summary.count(key)} {key}" for key in TEST_COUNTS)
    return f"{counts} in {number(summary.seconds, 's')} on {summary.node}"


def failing_test_files(summary: ReleaseTestsSummary) -> list[Row]:
    """file | outcome | tests | seconds, for every file that did not pass."""
    return [
        [f.file, f.outcome, str(f.tests), number(f.seconds)]
        for f in summary.files
        if f.outcome not in ("passed", "skipped")
    ]


def excluded_test_files(summary: ReleaseTestsSummary) -> list[Row]:
    """file | reason, for every file the classification excludes."""
    return [[e.file, e.reason] for e in summary.excluded]


def tests_headline(summary: ReleaseTestsSummary) -> str:
    """e.g. `41 passed, 0 failed`."""
    text = f"{summary.passed} passed, {summary.failed} failed"
    if summary.errors:
        text += f", {summary.errors} errors"
    return text


def tests_problems(summary: ReleaseTestsSummary, outcome: str) -> list[str]:
    """A pass with failing tests, or per-file test counts that do not add up to the totals."""
    problems: list[str] = []
    if outcome == "passed" and (summary.failed or summary.errors):
        problems.append("release_tests: outcome passed, but tests failed or errored")
    counted = sum(f.tests for f in summary.files)
    total = sum(summary.count(key) for key in TEST_COUNTS)
    if summary.files and counted != total:
        problems.append(f"release_tests: files hold {counted} tests, the counts add to {total}")
    return problems


def junit_problems(summary: ReleaseTestsSummary, counts: Mapping[str, int]) -> list[str]:
    """Counts in the summary that differ from those recomputed from the JUnit XML."""
    return [
        f"release_tests: {key} is {summary.count(key)} but the JUnit XML says {counts[key]}"
        for key in TEST_COUNTS
        if summary.count(key) != counts[key]
    ]


# --- dispatch ----------------------------------------------------------------------------------


def headline(stage: str, summary: BaseModel | None) -> str:
    """The headline of a stage for tables (empty for stages without one)."""
    del stage  # the summary's own type says which gate it is
    if isinstance(summary, ReleaseTestsSummary):
        return tests_headline(summary)
    if isinstance(summary, DeterminismSummary):
        return determinism_headline(summary)
    if isinstance(summary, ColdBootsSummary):
        return boots_headline(summary)
    if isinstance(summary, BenchmarkSummary):
        return bench_headline(summary)
    return ""


def summary_problems(stage: str, summary: BaseModel | None, outcome: str) -> list[str]:
    """Everything in a stage's summary that contradicts itself or its outcome."""
    del stage
    if isinstance(summary, ReleaseTestsSummary):
        return tests_problems(summary, outcome)
    if isinstance(summary, DeterminismSummary):
        return determinism_problems(summary, outcome)
    if isinstance(summary, ColdBootsSummary):
        return boots_problems(summary, outcome)
    if isinstance(summary, BenchmarkSummary):
        return bench_problems(summary, outcome)
    return []


def markdown_table(header: Sequence[str], rows: Sequence[Row]) -> list[str]:
    """Markdown table lines (cells with a `|` are escaped)."""

    def cells(values: Sequence[str]) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    return [cells(header), "|" + "---|" * len(header), *(cells(row) for row in rows)]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
