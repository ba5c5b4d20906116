"""Which compared metrics gate a release, and at what tolerance; every other one is reported.

A release is judged on what it changes: the engine's own work. By default the gate reads the
engine's CPU time per step when the engine reports it (it excludes the moments the machine ran
something else), else the engine's wall time per step, else, for engines that report neither,
every client metric as before. Client-observed times (TTFT, TPOT, tok/s) are always compared
and shown with their intervals; they gate only when a release names them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from pydantic import BaseModel, ConfigDict, Field

from flows.bench.report import METRICS

ENGINE_LEVEL = ("engine_cpu_ms", "engine_step_ms")
"""Engine-reported step times (ms) in order of preference for the default policy."""

DRAFT_ACCEPTANCE = "draft_acceptance_len"
"""Tokens per verification step under speculative decoding: reported beside the times (a
release that drafts worse shows here), gated only when a release names it."""

CLIENT_METRICS: dict[str, list[str]] = {
    "single_stream": ["ttft_p50_s", "tpot_p50_ms"],
    "closed_loop": ["tps"],
    "poisson": ["ttft_p50_s", "tpot_p50_ms"],
    "prefill": ["prefill_tps"],
    "step_grid": ["step_geomean_ms"],
    "prefix": ["cold_ttft_s", "warm_ttft_s"],
}
"""The client-observed metrics compared for each workload kind."""

KNOWN_METRICS = frozenset(METRICS)
"""Every metric a policy may name (ours and the recipe's imported ones)."""


class GatePolicy(BaseModel):
    """The metrics that decide the benchmark gate and their tolerances (percent)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metrics: tuple[str, ...] | None = Field(
        default=None, description="metrics that gate; None: the engine-level default"
    )
    tolerances_pct: Mapping[str, float] = Field(
        default_factory=dict, description="per-metric tolerance overriding the gate's (percent)"
    )

    @classmethod
    def of_settings(
        cls, gate_metrics: list[str] | None, tolerances: Mapping[str, float]
    ) -> GatePolicy:
        """The policy of a release's settings (tolerances as fractions, e.g. 0.03)."""
        metrics = tuple(gate_metrics) if gate_metrics is not None else None
        return cls(metrics=metrics, tolerances_pct={k: 100 * v for k, v in tolerances.items()})

    def gated(self, compared: Collection[str]) -> frozenset[str]:
        """The gating metrics among those compared (see the module docstring for the default)."""
        if self.metrics is not None:
            return frozenset(self.metrics)
        for metric in ENGINE_LEVEL:
            if metric in compared:
                return frozenset({metric})
        return frozenset(compared)

    def tolerance_pct(self, metric: str, default_pct: float) -> float:
        """The tolerance of one metric: its own if the policy names one, else the gate's."""
        return self.tolerances_pct.get(metric, default_pct)
