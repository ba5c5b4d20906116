"""The A/A ledger: past gaps between two arms of the same release, per point and metric.

Boot-to-boot noise cannot be seen inside one arm. Every session that runs the candidate twice
(C1 ... C2), and every pure A/A calibration session, contributes log(C1 / C2) for each point and
metric; `estimate_arms` pools these K gaps into the arm-level variance (t with K df). The ledger
is a small JSON file that only grows.

The n-1 gaps of n same-release arms (a calibration) are Helmert contrasts of the arms' log means,
scaled so each has the variance of one log(C1/C2) gap (2 sigma^2) and all are independent: the
first is exactly log(C1/C2), the k-th compares arm k+1 with the mean of the arms before it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flows.bench.report import ArmReport
from flows.bench.stats import aa_gap
from flows.errors import BenchError


def key(point: str, metric: str) -> str:
    """Ledger key of one point's metric."""
    return f"{point}:{metric}"


class Ledger(BaseModel):
    """Gaps log(C1/C2) keyed by `point:metric`, oldest first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["aa-ledger"] = "aa-ledger"
    gaps: dict[str, list[float]] = Field(default_factory=dict, description="key -> log gaps")
    sessions: list[str] = Field(default_factory=list, description="labels of contributing pairs")

    def for_metric(self, point: str, metric: str) -> list[float]:
        """The gaps recorded for one point's metric (empty if none)."""
        return list(self.gaps.get(key(point, metric), []))

    def with_session(self, first: ArmReport, second: ArmReport) -> Ledger:
        """A new ledger with the gaps of two arms of the same release added."""
        gaps = {k: list(v) for k, v in self.gaps.items()}
        for name, point in first.points.items():
            other = second.points.get(name)
            if other is None:
                continue
            for metric in point.gate:
                a, b = point.values(metric), other.values(metric)
                if a and b and min(a) > 0 and min(b) > 0:
                    gaps.setdefault(key(name, metric), []).append(aa_gap(a, b))
        label = f"{first.label} / {second.label}"
        return Ledger(gaps=gaps, sessions=[*self.sessions, label])


def read_ledger(path: Path) -> Ledger:
    """Read a ledger file; a missing file is an empty ledger.

    Raises:
        BenchError: if the file exists but is not a ledger.
    """
    if not path.exists():
        return Ledger()
    try:
        return Ledger.model_validate(json.loads(path.read_text()))
    except (json.JSONDecodeError, ValidationError) as error:
        raise BenchError(f"{path}: not an A/A ledger: {str(error).splitlines()[0]}") from error


def write_ledger(ledger: Ledger, path: Path) -> None:
    """Write a ledger file (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ledger.model_dump_json(indent=1) + "\n")


def helmert_gaps(reports: Sequence[ArmReport], label: str) -> Ledger:
    """n-1 independent A/A gaps from n arms of one release, per point and gated metric."""
    gaps: dict[str, list[float]] = {}
    for name, point in reports[0].points.items():
        for metric in point.gate:
            means = _arm_means(reports, name, metric)
            if means is None:
                continue
            logs = np.log(means)
            for k in range(1, len(logs)):
                contrast = float(np.mean(logs[:k]) - logs[k])
                gaps.setdefault(key(name, metric), []).append(math.sqrt(2 * k / (k + 1)) * contrast)
    sessions = [
        f"{label}: arm {k + 1} vs arms 1-{k}" if k > 1 else f"{label}: arm 2 vs arm 1"
        for k in range(1, len(reports))
    ]
    return Ledger(gaps=gaps, sessions=sessions)


def _arm_means(reports: Sequence[ArmReport], point: str, metric: str) -> list[float] | None:
    """Each arm's mean of one point's metric; None unless every arm has positive values."""
    means: list[float] = []
    for report in reports:
        found = report.points.get(point)
        values = found.values(metric) if found is not None else []
        if not values or min(values) <= 0:
            return None
        means.append(float(np.mean(values)))
    return means


def merge(ledgers: Sequence[Ledger]) -> Ledger:
    """One ledger holding every gap and session of the given ones, in order."""
    gaps: dict[str, list[float]] = {}
    sessions: list[str] = []
    for ledger in ledgers:
        for name, values in ledger.gaps.items():
            gaps.setdefault(name, []).extend(values)
        sessions.extend(ledger.sessions)
    return Ledger(gaps=gaps, sessions=sessions)


def boot_noise(ledger: Ledger) -> dict[str, float]:
    """Arm-to-arm SD (%) per point:metric implied by the gaps (each gap has variance 2 sd^2)."""
    return {
        name: round(100 * math.sqrt(float(np.mean(np.square(values))) / 2), 3)
        for name, values in ledger.gaps.items()
        if values
    }
