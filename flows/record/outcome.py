"""What a record's benchmark found, in one word, and the lines a record leads with (pure).

`records`, `records --brief`, `show` and the README name the benchmark's outcome (faster, level,
slower, inconclusive; lost when the candidate lost measurements) beside the verdict, so a
reader never has to decode "failed at benchmark: ..." to learn what the benchmark found.
"""

from __future__ import annotations

from flows.gates.benchmark.story import bench_outcome, headline_changes
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.gates.markdown import DASH
from flows.record.decisions import needs_acceptance
from flows.record.model import Record

STAGE = "benchmark"


def benchmark_outcome(record: Record) -> str:
    """faster, level, slower, inconclusive or lost; `skipped` or a dash when it did not run."""
    stage = record.stages.get(STAGE)
    if stage is None:
        return DASH
    summary = stage.summary_as(BenchmarkSummary)
    if summary is None or stage.outcome == "skipped":
        return stage.outcome if stage.outcome in ("skipped", "failed") else DASH
    return bench_outcome(summary)


def largest_intervals(record: Record, count: int = 3) -> list[str]:
    """The benchmark's gated rows that decided, then the largest changes, with their intervals."""
    summary = record.summary_of(BenchmarkSummary)
    return headline_changes(summary, count) if summary is not None else []


def lead(record: Record) -> list[str]:
    """What a record's README says first: the decision (the verdict), what the benchmark found,
    what a person must do about it, and the largest gated changes with their 95 % intervals."""
    verdict = record.verdict or "in progress"
    found = benchmark_outcome(record)
    lines = [f"**Verdict: {verdict}.** Benchmark: **{found}**."]
    if needs_acceptance(record):
        lines[0] += (
            " Not promoted by itself: a person decides, and approving needs a reason "
            f'(`sparkgate approve {record.release_name} --accept-inconclusive "REASON"`, or '
            '`sparkgate promote ... --accept-inconclusive "REASON"` later).'
        )
    changes = largest_intervals(record)
    if changes:
        lines += ["", "Largest gated changes [95% interval]:", ""]
        lines += [f"- {change}" for change in changes]
    return lines
