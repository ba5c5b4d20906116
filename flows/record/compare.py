"""Two records side by side: each gate, benchmark points, determinism scenarios and boots.

Pure: records in, (title, header, rows) sections out, for `sparkgate compare` to print. Rows are
matched by name (point, scenario, boot mode); a name only one record has shows a dash on the
other side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flows.record import tables
from flows.record.index import GATES, gate_cell
from flows.record.model import Record

Section = tuple[str, list[str], list[list[str]]]


def sections(first: Record, second: Record) -> list[Section]:
    """Every section with something to show."""
    found = [
        _gates(first, second),
        _benchmark(first, second),
        _determinism(first, second),
        _boots(first, second),
    ]
    return [section for section in found if section[2]]


def _summary(record: Record, stage: str) -> Mapping[str, Any]:
    entry = record.stages.get(stage)
    return entry.summary if entry is not None else {}


def _by(items: Any, key: str) -> dict[str, Mapping[str, Any]]:
    return {str(item.get(key)): item for item in items or [] if isinstance(item, Mapping)}


def _names(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return list(a) + [name for name in b if name not in a]


def _gates(first: Record, second: Record) -> Section:
    rows = [[gate, gate_cell(first, gate), gate_cell(second, gate)] for gate in GATES]
    rows.append(["verdict", first.verdict or first.status, second.verdict or second.status])
    return ("gates", ["", first.name, second.name], rows)


def _benchmark(first: Record, second: Record) -> Section:
    a = _points(_summary(first, "benchmark"))
    b = _points(_summary(second, "benchmark"))
    rows = [[name, _point(a.get(name)), _point(b.get(name))] for name in _names(a, b)]
    return (
        "benchmark: candidate (change [interval], verdict)",
        ["point", first.name, second.name],
        rows,
    )


def _points(summary: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Benchmark rows by point and metric (a point may gate several metrics)."""
    return {
        f"{p.get('point')} {p.get('unit', '')}".strip(): p
        for p in summary.get("points") or []
        if isinstance(p, Mapping)
    }


def _point(point: Mapping[str, Any] | None) -> str:
    if point is None:
        return tables.DASH
    return (
        f"{tables.number(point.get('candidate'))} ({tables.signed_pct(point.get('change'))} "
        f"{tables.interval(point.get('low'), point.get('high'))}, {point.get('verdict')})"
    )


def _determinism(first: Record, second: Record) -> Section:
    a = _by(_summary(first, "determinism").get("scenarios"), "name")
    b = _by(_summary(second, "determinism").get("scenarios"), "name")
    rows = [[name, _scenario(a.get(name)), _scenario(b.get(name))] for name in _names(a, b)]
    return ("determinism: identical responses", ["scenario", first.name, second.name], rows)


def _scenario(scenario: Mapping[str, Any] | None) -> str:
    if scenario is None:
        return tables.DASH
    identical, differing = scenario.get("identical", 0), scenario.get("differing", 0)
    return f"{identical}/{identical + differing}"


def _boots(first: Record, second: Record) -> Section:
    a = _by(_summary(first, "cold_boots").get("boots"), "mode")
    b = _by(_summary(second, "cold_boots").get("boots"), "mode")
    rows = [[name, _boot(a.get(name)), _boot(b.get(name))] for name in _names(a, b)]
    return (
        "cold boots: ready (compiles after preparation)",
        ["boot", first.name, second.name],
        rows,
    )


def _boot(boot: Mapping[str, Any] | None) -> str:
    if boot is None:
        return tables.DASH
    return (
        f"{tables.number(boot.get('ready_s'), 's')} "
        f"({boot.get('compiles_after_preparation', tables.DASH)} compiles)"
    )
