"""A few lines on what the records say: each release's verdict, the calibration, the headline.

`make demo` ends with these lines, so a new user sees at a glance what just happened: which
releases qualified, how noisy the calibration found the machine, the newest qualification's
gated changes with their intervals, and where the records are (pure: records in, lines out).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from flows.gates.benchmark.summary import BenchmarkSummary, CalibrationSummary, PointRow
from flows.record.model import Record

HEADLINES = 3
_FIRST = {"slower": 0, "inconclusive": 1}
"""Verdicts that fail a session, listed before the largest changes."""


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


def brief_lines(
    records: Sequence[Record], calibrations: Sequence[Record], experiments: Path
) -> list[str]:
    """The summary lines: releases oldest first, then the newest calibration and headline."""
    lines: list[str] = []
    newest: dict[str, Record] = {}
    for record in records:
        newest[record.release_name] = record
    for name, record in newest.items():
        against = f" (against {record.previous})" if record.previous else ""
        lines.append(f"{name}: {record.verdict or record.status}{against}  [{record.name}]")
    if calibrations:
        measured = calibrations[-1].stages.get("calibration")
        calibration = measured.summary_as(CalibrationSummary) if measured else None
        if calibration is not None:
            noise = calibration.boot_noise_pct
            engine = {k: v for k, v in noise.items() if k.endswith(":engine_cpu_ms")}
            shown = engine or noise
            worst = max(shown.values()) if shown else 0.0
            lines.append(
                f"calibration: {calibration.gaps} A/A gaps of {calibrations[-1].release_name} "
                f"({calibration.suite}); boot noise SD up to {worst:.2f}% "
                f"{'in engine CPU time per step' if engine else 'over every metric'}"
            )
    if records:
        last = records[-1]
        stage = last.stages.get("benchmark")
        summary = stage.summary_as(BenchmarkSummary) if stage else None
        if summary is not None and summary.points:
            which = "largest" if summary.decision == "pass" else "failing rows first, then largest"
            lines.append(
                f"{last.release_name} vs {last.previous}: {summary.decision} after "
                f"{len(summary.arms)} arms; {which} gated changes [95% interval]:"
            )
            lines.extend(f"    {line}" for line in headline_changes(summary))
    lines.append(f"records: {experiments} (sparkgate show <record>, sparkgate verify <record>)")
    return lines
