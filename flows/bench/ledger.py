"""The A/A ledger: past gaps between two arms of the same release, per point and metric.

Boot-to-boot noise cannot be seen inside one arm. Every session that runs the candidate twice
(C1 ... C2), and every pure A/A calibration session, contributes log(C1 / C2) for each point and
metric; `estimate_arms` pools these K gaps into the arm-level variance (t with K df). The ledger
is a small JSON file that only grows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

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
