"""The few lines `make demo` ends with, and the records table at 80 columns, from real records."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from flows.cli import main
from flows.commands.records import records_table
from flows.gates.benchmark.story import headline_changes
from flows.gates.benchmark.summary import BenchmarkSummary, PointRow
from flows.record.brief import brief_lines
from flows.record.reader import list_records

RECORDS = Path(__file__).resolve().parents[2] / "data" / "records" / "schema-1"


def test_brief_names_each_verdict_the_headline_changes_and_the_folder() -> None:
    records = list_records(RECORDS)
    lines = brief_lines(records, [], RECORDS)
    assert lines[0].startswith("r1: ")
    assert lines[1].startswith("r2: ")
    assert "(against r1)" in lines[1]
    headline = next(line for line in lines if line.startswith("r2 vs r1: "))
    # the one benchmark headline, then that session's rows: it ended inconclusive, so the rows
    # that failed it come first
    assert headline.endswith(
        "arms; 2 gated at 3%: 1 inconclusive, 1 faster; decided by "
        "prefill/1024 prefill_tps +222.5% [-99.7, +320693.8] inconclusive"
    )
    assert lines[lines.index(headline) + 1] == (
        "  failing rows first, then largest gated changes [95% interval]:"
    )
    changes = lines[lines.index(headline) + 2 : -1]
    assert 1 <= len(changes) <= 3
    assert all("%" in line and "[" in line for line in changes)
    assert lines[-1].startswith(f"records: {RECORDS}")


def test_a_failed_session_heads_with_the_rows_that_failed_it() -> None:
    rows = [
        PointRow(point="step/grid", unit="engine_cpu_ms", change=-59.8, low=-62.2, high=-57.3,
                 verdict="faster"),
        PointRow(point="streams/c1", unit="engine_cpu_ms", change=-23.2, low=-42.9, high=3.3,
                 verdict="inconclusive"),
        PointRow(point="poisson/r4", unit="engine_cpu_ms", change=-60.0, low=-77.3, high=-29.2,
                 verdict="faster"),
        PointRow(point="prefill/512", unit="engine_cpu_ms", change=+9.0, low=4.0, high=14.0,
                 verdict="slower"),
    ]  # fmt: skip
    lines = headline_changes(BenchmarkSummary(points=rows))
    assert [line.split(":")[0] for line in lines] == [
        "prefill/512 engine_cpu_ms", "streams/c1 engine_cpu_ms", "poisson/r4 engine_cpu_ms",
    ]  # fmt: skip
    assert lines[1] == "streams/c1 engine_cpu_ms: -23.2% [-42.9, +3.3] inconclusive"


def test_records_brief_prints_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["records", "--brief", "--experiments", str(RECORDS)]) == 0
    assert "r2 vs r1: " in capsys.readouterr().out


def test_records_fit_80_columns_with_one_row_per_line_pair() -> None:
    console = Console(width=80, record=True)
    console.print(records_table(RECORDS, width=80))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert len(lines) <= 12  # two records: no cell wraps into a column of single words
    text = "\n".join(lines)
    assert "2026-12-03-r2" in text  # a record name is never wrapped
    assert "2026-12-03-r1" in text
    words = text.split()
    assert all(
        w in words for w in ("failed", "benchmark:", "inconclusive", "qualified", "awaiting")
    )
    wide = Console(width=200, record=True)
    wide.print(records_table(RECORDS, width=200))
    assert "scenarios" in wide.export_text()
