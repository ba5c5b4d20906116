"""The probes' rules (pure): readings, the limits an arm crossed, whether nodes have cooled down,
and whether a host fact is what the cluster file expects.

Kept apart from the commands that take readings so each rule is tested on plain values, and so
a record's `probes.json` can be judged again from its readings alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from flows.cluster.probes.parsers import Value, Values
from flows.spec.probes import HostFact, HostSample, Limit

Phase = Literal["cooldown", "before", "during", "after"]
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Reading(BaseModel):
    """One probe read on one node: its values, or why there are none."""

    model_config = _FROZEN

    node: str
    probe: str
    phase: Phase
    at_s: float = Field(description="Seconds since the arm's first reading.")
    values: Values = {}
    error: str | None = None


class Crossing(BaseModel):
    """A declared limit one node's readings went past during an arm."""

    model_config = _FROZEN

    node: str
    probe: str
    value: str
    limit: str
    seen: float
    at_s: float

    def text(self) -> str:
        """One line for a person: where, what, how far, when."""
        where = f"{self.node} {self.probe} {self.value}"
        return f"{where} {self.seen:g} ({self.limit}) at {self.at_s:.0f}s"


class ArmProbes(BaseModel):
    """What `probes.json` holds beside an arm's arm.json: every reading and every crossing."""

    model_config = _FROZEN

    every_s: float
    readings: list[Reading] = []
    crossings: list[Crossing] = []

    @property
    def disturbed(self) -> bool:
        """True when any declared limit was crossed."""
        return bool(self.crossings)


def _number(values: Values, key: str) -> float | None:
    found: Value | None = values.get(key)
    return found if isinstance(found, float) else None


def _point_crossing(limit: Limit, seen: float) -> str | None:
    if limit.max is not None and seen > limit.max:
        return f"above max {limit.max:g}"
    if limit.min is not None and seen < limit.min:
        return f"below min {limit.min:g}"
    if limit.forbid_bits is not None and int(seen) & limit.forbid_bits:
        return f"bits {int(seen) & limit.forbid_bits:#x} of forbidden {limit.forbid_bits:#x}"
    return None


def crossings(samples: Sequence[HostSample], readings: Sequence[Reading]) -> list[Crossing]:
    """Every limit crossed, once per node, probe and value (its first crossing; growth over
    the arm from the first reading to the last)."""
    found: list[Crossing] = []
    for sample in samples:
        for node in dict.fromkeys(r.node for r in readings if r.probe == sample.name):
            series = [r for r in readings if r.probe == sample.name and r.node == node]
            for limit in sample.limits:
                found.extend(_limit_crossings(sample.name, node, limit, series))
    return found


def _limit_crossings(
    probe: str, node: str, limit: Limit, series: Sequence[Reading]
) -> list[Crossing]:
    found: list[Crossing] = []
    points = [
        (r.at_s, seen) for r in series if (seen := _number(r.values, limit.value)) is not None
    ]
    for at_s, seen in points:
        why = _point_crossing(limit, seen)
        if why is not None:
            found.append(Crossing(node=node, probe=probe, value=limit.value, limit=why,
                                  seen=seen, at_s=at_s))  # fmt: skip
            break
    if limit.max_growth is not None and len(points) >= 2:
        grown = points[-1][1] - points[0][1]
        if grown > limit.max_growth:
            found.append(
                Crossing(
                    node=node,
                    probe=probe,
                    value=limit.value,
                    limit=f"grew by more than {limit.max_growth:g}",
                    seen=grown,
                    at_s=points[-1][0],
                )
            )
    return found


def not_cooled(samples: Sequence[HostSample], latest: Sequence[Reading]) -> list[str]:
    """Why the nodes may not start an arm yet (empty: every cool-down condition holds)."""
    found: list[str] = []
    for sample in samples:
        for reading in (r for r in latest if r.probe == sample.name):
            for limit in sample.limits:
                if limit.cool_max is None and limit.cool_min is None:
                    continue
                seen = _number(reading.values, limit.value)
                where = f"{reading.node} {sample.name} {limit.value}"
                if seen is None:
                    found.append(f"{where}: no reading ({reading.error or 'not a number'})")
                elif limit.cool_max is not None and seen > limit.cool_max:
                    found.append(f"{where} {seen:g} above {limit.cool_max:g}")
                elif limit.cool_min is not None and seen < limit.cool_min:
                    found.append(f"{where} {seen:g} below {limit.cool_min:g}")
    return found


def fact_problem(fact: HostFact, value: Value | None) -> str | None:
    """Why a host fact is not what the cluster file expects (None: it is); names both values."""
    if value is None:
        return f"no value {fact.value!r}"
    shown = value if isinstance(value, str) else f"{value:g}"
    if fact.expect is not None and shown != fact.expect:
        return f"is {shown!r}, expected {fact.expect!r}"
    if fact.pattern is not None and not re.search(fact.pattern, shown):
        return f"is {shown!r}, expected to match /{fact.pattern}/"
    return _range_problem(fact, value, shown)


def _range_problem(fact: HostFact, value: Value, shown: str) -> str | None:
    if fact.at_least is None and fact.at_most is None:
        return None
    if not isinstance(value, float):
        return f"is {shown!r}, expected a number"
    if fact.at_least is not None and value < fact.at_least:
        return f"is {shown}, expected at least {fact.at_least:g}"
    if fact.at_most is not None and value > fact.at_most:
        return f"is {shown}, expected at most {fact.at_most:g}"
    return None
