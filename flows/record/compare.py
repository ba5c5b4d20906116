"""Two records side by side: each gate, benchmark points, determinism scenarios and boots.

Pure: records in, (title, header, rows) sections out, for `sparkgate compare` to print. Rows are
matched by name (point, scenario, boot mode); a name only one record has shows a dash on the
other side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from flows.gates.benchmark.summary import BenchmarkSummary, PointRow
from flows.gates.cold_boots.summary import BootRow, ColdBootsSummary
from flows.gates.determinism.summary import DeterminismSummary, ScenarioRow
from flows.gates.registry import GATES
from flows.record import tables
from flows.record.index import gate_cell
from flows.record.model import Record

Section = tuple[str, list[str], list[list[str]]]
T = TypeVar("T")


def sections(first: Record, second: Record) -> list[Section]:
    """Every section with something to show."""
    found = [
        _gates(first, second),
        _benchmark(first, second),
        _determinism(first, second),
        _boots(first, second),
    ]
    return [section for section in found if section[2]]


def _by(items: Sequence[T], key: Callable[[T], str]) -> dict[str, T]:
    return {key(item): item for item in items}


def _names(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return list(a) + [name for name in b if name not in a]


def _gates(first: Record, second: Record) -> Section:
    rows = [[gate, gate_cell(first, gate), gate_cell(second, gate)] for gate in GATES]
    rows.append(["verdict", first.verdict or first.status, second.verdict or second.status])
    return ("gates", ["", first.name, second.name], rows)


def _benchmark(first: Record, second: Record) -> Section:
    a = _points(first.summary_of(BenchmarkSummary))
    b = _points(second.summary_of(BenchmarkSummary))
    rows = [[name, _point(a.get(name)), _point(b.get(name))] for name in _names(a, b)]
    return (
        "benchmark: candidate (change [interval], verdict)",
        ["point", first.name, second.name],
        rows,
    )


def _points(summary: BenchmarkSummary | None) -> dict[str, PointRow]:
    """Benchmark rows by point and metric (a point may gate several metrics)."""
    points = summary.points if summary is not None else []
    return _by(points, lambda p: f"{p.point} {p.unit}".strip())


def _point(point: PointRow | None) -> str:
    if point is None:
        return tables.DASH
    return (
        f"{tables.number(point.candidate)} ({tables.signed_pct(point.change)} "
        f"{tables.interval(point.low, point.high)}, {point.verdict})"
    )


def _determinism(first: Record, second: Record) -> Section:
    a = _scenarios(first.summary_of(DeterminismSummary))
    b = _scenarios(second.summary_of(DeterminismSummary))
    rows = [[name, _scenario(a.get(name)), _scenario(b.get(name))] for name in _names(a, b)]
    return ("determinism: identical responses", ["scenario", first.name, second.name], rows)


def _scenarios(summary: DeterminismSummary | None) -> dict[str, ScenarioRow]:
    return _by(summary.scenarios if summary is not None else [], lambda s: s.name)


def _scenario(scenario: ScenarioRow | None) -> str:
    if scenario is None:
        return tables.DASH
    return f"{scenario.identical}/{scenario.identical + scenario.differing}"


def _boots(first: Record, second: Record) -> Section:
    a = _boot_rows(first.summary_of(ColdBootsSummary))
    b = _boot_rows(second.summary_of(ColdBootsSummary))
    rows = [[name, _boot(a.get(name)), _boot(b.get(name))] for name in _names(a, b)]
    return (
        "cold boots: ready (compiles after preparation)",
        ["boot", first.name, second.name],
        rows,
    )


def _boot_rows(summary: ColdBootsSummary | None) -> dict[str, BootRow]:
    return _by(summary.boots if summary is not None else [], lambda b: b.mode)


def _boot(boot: BootRow | None) -> str:
    if boot is None:
        return tables.DASH
    return f"{tables.number(boot.ready_s, 's')} ({boot.compiles_after_preparation} compiles)"
