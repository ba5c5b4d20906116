"""One benchmark headline, from the gated rows, told alike by every view of a record (issue 29)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main
from flows.gates.benchmark.story import (
    BENCHMARK_STORY,
    bench_headline,
    bench_rows,
    plot_benchmark,
    plot_limit,
)
from flows.gates.benchmark.summary import BenchmarkSummary, PointRow
from flows.gates.markdown import DASH
from flows.pipeline.artifacts import benchmark_description
from flows.record.brief import brief_lines
from flows.record.reader import list_records, read_record

RECORDS = Path(__file__).resolve().parents[2] / "data" / "records" / "schema-1"
R2_HEADLINE = (
    "2 gated at 3%: 1 inconclusive, 1 faster; decided by prefill/1024 prefill_tps +222.5% "
    "[-99.7, +320693.8] inconclusive"
)


def _row(point: str, change: float, verdict: str, *, gated: bool = True) -> PointRow:
    return PointRow(point=point, unit="tps", change=change, low=change - 2, high=change + 2,
                    verdict=verdict, gated=gated)  # fmt: skip


def test_reported_rows_are_counted_apart_and_never_head_the_line() -> None:
    summary = BenchmarkSummary(
        points=[
            _row("decode/c1", 5.0, "faster"),
            _row("decode/c4", 0.5, "level"),
            _row("prefill/512", 298.0, "faster", gated=False),  # wide, but only reported
        ]
    )
    assert bench_headline(summary) == (
        "2 gated at 3%: 1 faster, 1 level; largest decode/c1 tps +5.0% [+3.0, +7.0] faster; "
        "1 reported, not gated"
    )


def test_a_failing_gated_row_decides_the_headline_before_a_larger_change() -> None:
    summary = BenchmarkSummary(
        points=[_row("decode/c1", 40.0, "faster"), _row("decode/c4", -6.0, "slower")]
    )
    assert bench_headline(summary) == (
        "2 gated at 3%: 1 slower, 1 faster; decided by decode/c4 tps -6.0% [-8.0, -4.0] slower"
    )


def test_a_combined_suites_point_keeps_its_suite_in_the_headline() -> None:
    summary = BenchmarkSummary(points=[_row("single-stream:single/c1", -15.1, "level")])
    assert bench_headline(summary) == (
        "1 gated at 3%: 1 level; largest single-stream:single/c1 tps -15.1% [-17.1, -13.1] level"
    )


def test_rows_say_whether_they_gate() -> None:
    summary = BenchmarkSummary(
        points=[_row("decode/c1", 5.0, "faster"), _row("x", 1.0, "level", gated=False)]
    )
    assert [row[-1] for row in bench_rows(summary)] == ["gates", "reported"]


def test_records_show_compare_brief_and_artifact_tell_the_same_headline(
    capsys: pytest.CaptureFixture[str],
) -> None:
    record = read_record(RECORDS / "2026-12-03-r2")
    summary = record.summary_of(BenchmarkSummary)
    assert summary is not None
    assert bench_headline(summary) == R2_HEADLINE
    assert BENCHMARK_STORY.headline(summary) == R2_HEADLINE
    assert benchmark_description("r2", summary).endswith(R2_HEADLINE)
    brief = brief_lines(list_records(RECORDS), [], RECORDS)
    assert any(line.endswith(R2_HEADLINE) for line in brief)
    compared = BENCHMARK_STORY.compare(read_record(RECORDS / "2026-12-03-r1"), record)
    assert compared is not None
    assert compared[2][0] == ["headline", DASH, R2_HEADLINE]
    assert main(["compare", "r1", "r2", "--experiments", str(RECORDS)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "│ headline " in out
    assert "inconclusive, gates)" in out


def test_the_plot_clips_its_axis_to_the_tolerance_band_not_the_widest_interval(
    tmp_path: Path,
) -> None:
    wide = PointRow(point="prefill/1024", unit="tps", change=20.0, low=-99.7, high=1400.0,
                    verdict="inconclusive")  # fmt: skip
    rows = [wide, _row("decode/c1", 1.0, "level"), _row("r", 900.0, "faster", gated=False)]
    assert plot_limit([wide, rows[1]], 3.0) == 1000.0  # capped, not run to +1400 %
    assert plot_limit([rows[1]], 3.0) == 15.0  # the band stays wide: five tolerances
    path = plot_benchmark(BenchmarkSummary(points=rows), tmp_path / "benchmark.png")
    assert path.stat().st_size > 0
