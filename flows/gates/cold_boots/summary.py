"""The cold-boots gate's summary: one row per boot mode and the reference hashes it matched."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from flows.gates.determinism.summary import PromptHashes

SpotCheck = Literal["identical", "differs", "not run"]
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class RankFigures(BaseModel):
    """One rank's preparation during a boot."""

    model_config = _FROZEN

    rank: int
    node: str
    prepare_s: float | None
    kernels: int | None
    compiled: int | None
    cached: int | None
    liveness_wait_s: float | None


class BootRow(BaseModel):
    """One row of the record's boots table."""

    model_config = _FROZEN

    mode: str
    ready_s: float | None = None
    prepare_s_max: float | None = None
    kernels: int | None = None
    compiled: int | None = None
    cached: int | None = None
    liveness_wait_s_max: float | None = None
    compiles_after_preparation: int = 0
    compiles_metric: float | None = None
    spot_check: SpotCheck = "not run"
    what_happened: str = ""
    passed: bool = True
    ranks: list[RankFigures] = []
    error: str | None = None


class ColdBootsSummary(BaseModel):
    """What the record renders of the cold-boots gate (and `verify` rebuilds per boot)."""

    model_config = _FROZEN

    gate: Literal["cold_boots"] = "cold_boots"
    boots: list[BootRow] = []
    reference: dict[str, PromptHashes] = {}
