"""Pure readings of each gate's summary: table rows, headline numbers and consistency checks.

The README, the index, `sparkgate records` and `verify` all read gate summaries through this
module, so a number is formatted and a verdict is recomputed in exactly one place. Nothing here
touches files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from flows.bench.stats import Verdict, non_inferiority

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


def bench_verdict(point: Mapping[str, Any], tolerance: Any) -> str:
    """The non-inferiority verdict of one point, recomputed from its interval."""
    low, high = point.get("low"), point.get("high")
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        return Verdict.INCONCLUSIVE.value
    return non_inferiority(
        float(low),
        float(high),
        higher_is_better=bool(point.get("higher_is_better", True)),
        tolerance_pct=tolerance_pct(tolerance),
    ).value


def bench_rows(summary: Mapping[str, Any]) -> list[Row]:
    """workload | previous | candidate (change [interval]) | verdict, like the recipe's notes.

    The change is shown as counting (bold) only when the verdict is faster or slower; a level or
    inconclusive point names its verdict instead, with the interval that decided it.
    """
    rows: list[Row] = []
    for point in summary.get("points", []):
        unit = str(point.get("unit", ""))
        verdict = str(point.get("verdict", DASH))
        change = point.get("change")
        span = interval(point.get("low"), point.get("high"))
        if verdict in COUNTING:
            detail = f"**{signed_pct(change)}** {span}"
        else:
            detail = f"{verdict}: {signed_pct(change)} {span}"
        candidate = f"{number(point.get('candidate'))} ({detail})"
        direction = "higher is better" if point.get("higher_is_better", True) else "lower is better"
        rows.append(
            [
                f"{point.get('point', '?')} ({unit}, {direction})",
                number(point.get("previous")),
                candidate,
                verdict,
            ]
        )
    return rows


def bench_headline(summary: Mapping[str, Any]) -> str:
    """e.g. `2 faster, 3 level; best decode/prose-c1 +12.0%`."""
    points = list(summary.get("points", []))
    if not points:
        return "no points"
    counts: dict[str, int] = {}
    for point in points:
        counts[str(point.get("verdict"))] = counts.get(str(point.get("verdict")), 0) + 1
    text = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
    counting = [p for p in points if p.get("verdict") in COUNTING and _is_number(p.get("change"))]
    if counting:
        top = max(counting, key=lambda p: abs(float(p["change"])))
        name = f"{top.get('point')} {top.get('unit', '')}".strip()
        text += f"; {top.get('verdict')} {name} {signed_pct(top['change'])}"
    return text


def bench_problems(summary: Mapping[str, Any], outcome: str) -> list[str]:
    """Verdicts that do not follow from their intervals, and an outcome that does not follow."""
    problems: list[str] = []
    tolerance = summary.get("tolerance", 0.03)
    failing: list[str] = []
    for point in summary.get("points", []):
        expected = bench_verdict(point, tolerance)
        if point.get("verdict") != expected:
            problems.append(
                f"benchmark: {point.get('point')}: verdict {point.get('verdict')!r}, but its "
                f"interval {interval(point.get('low'), point.get('high'))} at tolerance "
                f"{tolerance_pct(tolerance):g}% gives {expected!r}"
            )
        if not Verdict(expected).passes:
            failing.append(str(point.get("point")))
    if outcome == "passed" and failing:
        problems.append(f"benchmark: outcome passed, but points do not pass: {', '.join(failing)}")
    return problems


# --- cold boots --------------------------------------------------------------------------------


def boot_rows(summary: Mapping[str, Any]) -> list[Row]:
    """boot | ready | what happened, as the recipe's boot tables read."""
    return [
        [
            str(boot.get("mode", "?")),
            number(boot.get("ready_s"), "s"),
            str(boot.get("what_happened", "")),
        ]
        for boot in summary.get("boots", [])
    ]


def boot_detail_rows(summary: Mapping[str, Any]) -> list[Row]:
    """Per boot: slowest preparation, kernels compiled/cached, liveness wait, compiles, check."""
    return [
        [
            str(boot.get("mode", "?")),
            number(boot.get("prepare_s_max"), "s"),
            (
                f"{boot.get('kernels', DASH)} ({boot.get('compiled', DASH)} compiled, "
                f"{boot.get('cached', DASH)} cached)"
            ),
            number(boot.get("liveness_wait_s_max"), "s"),
            str(boot.get("compiles_after_preparation", DASH)),
            str(boot.get("spot_check", DASH)),
        ]
        for boot in summary.get("boots", [])
    ]


def boot_failures(boot: Mapping[str, Any]) -> list[str]:
    """Why one boot fails the gate: no ready time, compiles after preparation, a changed output."""
    reasons: list[str] = [f"error: {boot['error']}"] if boot.get("error") else []
    if boot.get("passed") is False:
        reasons.append("marked failed by the gate")
    if not _is_number(boot.get("ready_s")):
        reasons.append("never ready")
    compiles = boot.get("compiles_after_preparation")
    if not isinstance(compiles, int) or compiles != 0:
        reasons.append(f"{compiles} compiles after preparation")
    if boot.get("spot_check") != "identical":
        reasons.append(f"spot check {boot.get('spot_check')}")
    return reasons


def boots_headline(summary: Mapping[str, Any]) -> str:
    """e.g. `4 boots, ready 3.1-9.8 s, 0 compiles after preparation`."""
    boots = list(summary.get("boots", []))
    ready = [float(b["ready_s"]) for b in boots if _is_number(b.get("ready_s"))]
    compiles = sum(
        int(b.get("compiles_after_preparation") or 0)
        for b in boots
        if isinstance(b.get("compiles_after_preparation"), int)
    )
    span = f"ready {min(ready):.1f}-{max(ready):.1f} s" if ready else "never ready"
    return f"{len(boots)} boots, {span}, {compiles} compiles after preparation"


def boots_problems(summary: Mapping[str, Any], outcome: str) -> list[str]:
    """An outcome of passed while some boot shows a failure."""
    if outcome != "passed":
        return []
    return [
        f"cold_boots: outcome passed, but boot {boot.get('mode')}: {'; '.join(reasons)}"
        for boot in summary.get("boots", [])
        if (reasons := boot_failures(boot))
    ]


# --- determinism -------------------------------------------------------------------------------


def determinism_rows(summary: Mapping[str, Any]) -> list[Row]:
    """scenario | identical | first difference."""
    rows: list[Row] = []
    for scenario in summary.get("scenarios", []):
        identical, differing = scenario.get("identical", 0), scenario.get("differing", 0)
        first = scenario.get("first_difference")
        where = (
            f"prompt {first.get('prompt')}, token {first.get('index')}"
            if isinstance(first, Mapping)
            else DASH
        )
        rows.append([str(scenario.get("name", "?")), f"{identical}/{identical + differing}", where])
    return rows


def against_previous_line(summary: Mapping[str, Any], previous: str | None) -> str:
    """One sentence on how the outputs compare with the previous release."""
    against = summary.get("against_previous") or {}
    mode = against.get("mode", "none")
    identical, total = against.get("identical", 0), against.get("total", 0)
    name = previous or "the previous release"
    if mode == "unchanged":
        return (
            f"Against {name} (outputs declared unchanged): {identical}/{total} responses "
            "identical, tokens and logprobs."
        )
    if mode == "changed":
        agreement = against.get("top_token_agreement")
        share = f"{agreement * 100:.1f}%" if isinstance(agreement, int | float) else DASH
        return (
            f"Against {name} (outputs declared changed): {identical}/{total} responses "
            f"identical, top-token agreement {share}; {against.get('reason', '')}"
        )
    return f"No comparison with a previous release: {against.get('reason', 'none')}."


def determinism_headline(summary: Mapping[str, Any]) -> str:
    """e.g. `6/6 scenarios identical; vs previous 9/9`."""
    scenarios = list(summary.get("scenarios", []))
    clean = sum(1 for s in scenarios if not s.get("differing"))
    text = f"{clean}/{len(scenarios)} scenarios identical"
    against = summary.get("against_previous") or {}
    if against.get("mode") in ("unchanged", "changed"):
        text += f"; vs previous {against.get('identical', 0)}/{against.get('total', 0)}"
    return text


def determinism_problems(summary: Mapping[str, Any], outcome: str) -> list[str]:
    """Scenarios that contradict themselves, and a pass that the figures do not allow."""
    problems: list[str] = []
    for scenario in summary.get("scenarios", []):
        name, differing = scenario.get("name"), scenario.get("differing", 0)
        if bool(differing) != (scenario.get("first_difference") is not None):
            problems.append(f"determinism: {name}: differing and first difference disagree")
        if differing and outcome == "passed":
            problems.append(f"determinism: outcome passed, but {name} has {differing} differing")
    against = summary.get("against_previous") or {}
    if (
        against.get("mode") == "unchanged"
        and against.get("identical") != against.get("total")
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


def tests_line(summary: Mapping[str, Any]) -> str:
    """e.g. `41 passed, 0 failed, 0 errors, 2 skipped in 12.3 s on spark1`."""
    counts = ", ".join(f"{summary.get(key, 0)} {key}" for key in TEST_COUNTS)
    return f"{counts} in {number(summary.get('seconds'), 's')} on {summary.get('node', '?')}"


def failing_test_files(summary: Mapping[str, Any]) -> list[Row]:
    """file | outcome | tests | seconds, for every file that did not pass."""
    return [
        [str(f.get("file")), str(f.get("outcome")), str(f.get("tests")), number(f.get("seconds"))]
        for f in summary.get("files", [])
        if f.get("outcome") not in ("passed", "skipped")
    ]


def excluded_test_files(summary: Mapping[str, Any]) -> list[Row]:
    """file | reason, for every file the classification excludes."""
    return [[str(e.get("file")), str(e.get("reason"))] for e in summary.get("excluded", [])]


def tests_headline(summary: Mapping[str, Any]) -> str:
    """e.g. `41 passed, 0 failed`."""
    text = f"{summary.get('passed', 0)} passed, {summary.get('failed', 0)} failed"
    if summary.get("errors"):
        text += f", {summary.get('errors')} errors"
    return text


def tests_problems(summary: Mapping[str, Any], outcome: str) -> list[str]:
    """A pass with failing tests, or per-file test counts that do not add up to the totals."""
    problems: list[str] = []
    if outcome == "passed" and (summary.get("failed") or summary.get("errors")):
        problems.append("release_tests: outcome passed, but tests failed or errored")
    files = list(summary.get("files", []))
    counted = sum(int(f.get("tests") or 0) for f in files)
    total = sum(int(summary.get(key) or 0) for key in TEST_COUNTS)
    if files and counted != total:
        problems.append(f"release_tests: files hold {counted} tests, the counts add to {total}")
    return problems


def junit_problems(summary: Mapping[str, Any], counts: Mapping[str, int]) -> list[str]:
    """Counts in the summary that differ from those recomputed from the JUnit XML."""
    return [
        f"release_tests: {key} is {summary.get(key)} but the JUnit XML says {counts[key]}"
        for key in TEST_COUNTS
        if int(summary.get(key) or 0) != counts[key]
    ]


# --- dispatch ----------------------------------------------------------------------------------

HEADLINES = {
    "release_tests": tests_headline,
    "determinism": determinism_headline,
    "cold_boots": boots_headline,
    "benchmark": bench_headline,
}
PROBLEMS = {
    "release_tests": tests_problems,
    "determinism": determinism_problems,
    "cold_boots": boots_problems,
    "benchmark": bench_problems,
}


def headline(stage: str, summary: Mapping[str, Any]) -> str:
    """The headline of a stage for tables (empty for stages without one)."""
    reader = HEADLINES.get(stage)
    if not summary:
        return ""
    try:
        return reader(summary) if reader else ""
    except (TypeError, ValueError, KeyError, AttributeError):
        return "(summary unreadable)"


def summary_problems(stage: str, summary: Mapping[str, Any], outcome: str) -> list[str]:
    """Everything in a stage's summary that contradicts itself or its outcome."""
    checker = PROBLEMS.get(stage)
    if checker is None:
        return []
    try:
        return checker(summary, outcome)
    except (TypeError, ValueError, KeyError, AttributeError) as error:
        return [f"{stage}: summary unreadable ({error})"]


def markdown_table(header: Sequence[str], rows: Sequence[Row]) -> list[str]:
    """Markdown table lines (cells with a `|` are escaped)."""

    def cells(values: Sequence[str]) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    return [cells(header), "|" + "---|" * len(header), *(cells(row) for row in rows)]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
