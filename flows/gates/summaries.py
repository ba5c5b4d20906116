"""Every gate's summary as one typed union, told apart by its `gate` field.

`GateResult.summary` and the record's copy of it are a `GateSummary`: the record code reads
fields, never string keys. Adding a gate adds its summary model here (see `flows.gates`); the
order of the gates is the registry's (`flows.gates.registry`), the one list of them.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from pydantic import BaseModel, Field

from flows.gates.benchmark.summary import BenchmarkSummary, CalibrationSummary
from flows.gates.cold_boots.summary import ColdBootsSummary
from flows.gates.determinism.summary import DeterminismSummary
from flows.gates.release_tests.summary import ReleaseTestsSummary

GateSummary = Annotated[
    ReleaseTestsSummary | DeterminismSummary | ColdBootsSummary | BenchmarkSummary
    | CalibrationSummary,
    Field(discriminator="gate"),
]  # fmt: skip
S = TypeVar("S", bound=BaseModel)


def summary_as(summary: BaseModel | None, model: type[S]) -> S | None:
    """The summary when it is a `model`, else None (a skipped or crashed gate has none)."""
    return summary if isinstance(summary, model) else None
