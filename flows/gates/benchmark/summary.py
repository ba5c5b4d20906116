"""The benchmark gate's summary (and the calibration run's, which measures arms the same way)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from flows.bench.stats import SlowerRule
from flows.gates.benchmark.cross_rules import CrossSession
from flows.spec.gate_policy import GatePolicy

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class PointRow(BaseModel):
    """One point and gated metric: both roles' levels, the change, its interval, the verdict."""

    model_config = _FROZEN

    point: str
    unit: str = ""
    higher_is_better: bool = True
    previous: float | None = None
    candidate: float | None = None
    change: float | None = None
    low: float | None = None
    high: float | None = None
    verdict: str = "inconclusive"
    gated: bool = True
    tolerance_pct: float | None = None
    """The tolerance this row's verdict used (a metric's or a workload's own); None: the gate's."""


class DisturbedArm(BaseModel):
    """An arm during which a host crossed a declared limit: kept as evidence, measured again."""

    model_config = _FROZEN

    index: int
    role: Literal["candidate", "previous"]
    folder: str
    """Where its receipts and readings are kept, under `arms/`."""
    reasons: list[str]


class BenchmarkSummary(BaseModel):
    """What the record renders of the benchmark gate (and `verify` compares again)."""

    model_config = _FROZEN

    gate: Literal["benchmark"] = "benchmark"
    arms: list[Literal["candidate", "previous"]] = []
    tolerance: float = 0.03
    decision: str | None = None
    ledger_gaps: int = 0
    looks: int | None = None
    """How many times the session could compare (`compare_arms`); None in records written
    before sessions accounted for looking more than once and at many points."""
    slower_rule: SlowerRule = SlowerRule.INTERVAL
    """What a slower verdict needed; records without it were decided by the older rule."""
    gate_metrics: list[str] | None = None
    tolerances: dict[str, float] = {}
    points: list[PointRow] = []
    kv_capacity_tokens: dict[str, float] = {}
    """KV cache capacity (tokens) per role where the engine exports it; reported, never gated."""
    disturbed: list[DisturbedArm] = []
    """Arms measured again because a host probe crossed its limit (not counted in `arms`)."""
    cross_session: CrossSession | None = None
    """An irreversible host change: the previous release's arms came from another session's
    record (copied under arms/recorded-*), compared by the wider rule this states."""

    def policy(self) -> GatePolicy:
        """The gate policy the session used (None: the engine-level default), to recompute it."""
        return GatePolicy.of_settings(self.gate_metrics, self.tolerances)


class CalibrationSummary(BaseModel):
    """What a calibration run keeps: its A/A gaps and the boot noise they imply."""

    model_config = _FROZEN

    gate: Literal["calibration"] = "calibration"
    arms: int
    suite: str
    shape: str
    gaps: int
    boot_noise_pct: dict[str, float] = {}
