"""The paused run's description says what a person approves, read from the published record."""

from __future__ import annotations

from pathlib import Path

from flows.gates.benchmark.story import bench_headline, headline_changes
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.promotion.decision import described_record
from flows.promotion.description import decision_description
from flows.record.reader import read_record

RECORDS = Path(__file__).resolve().parents[2] / "data" / "records" / "schema-1"


def test_it_gives_verdict_gates_benchmark_decision_headline_changes_and_path() -> None:
    path = RECORDS / "2026-12-03-r2"
    record = read_record(path)
    stage = record.stages["benchmark"]
    summary = stage.summary_as(BenchmarkSummary)
    assert summary is not None

    text = decision_description("r2", described_record(path), str(path))

    assert text.startswith("### Promote r2?")
    assert f"**Verdict:** {record.verdict} against r1" in text
    assert f"determinism {record.stages['determinism'].outcome}" in text
    assert f"**Benchmark:** {summary.decision} after {len(summary.arms)} arms" in text
    assert bench_headline(summary) in text  # the one headline, as records and the board say
    changes = headline_changes(summary)
    assert changes, "the test record has gated changes"
    for change in changes:  # the same rows `records --brief` names, with their intervals
        assert f"  - {change}" in text
        assert "%" in change
        assert "[" in change
    assert f"**Record:** `{path}`" in text
    assert "sparkgate approve r2" in text


def test_without_a_benchmark_it_says_how_the_stage_ended() -> None:
    path = RECORDS / "2026-12-03-r1"
    text = decision_description("r1", read_record(path), str(path))
    assert "**Verdict:** " in text
    assert "Largest gated changes" not in text
    stage = read_record(path).stages.get("benchmark")
    if stage is not None:
        assert f"**Benchmark:** {stage.outcome}" in text


def test_an_unreadable_record_still_names_the_path(tmp_path: Path) -> None:
    assert described_record(tmp_path) is None
    text = decision_description("r2", None, str(tmp_path))
    assert f"**Record:** `{tmp_path}`" in text
    assert "Verdict" not in text
