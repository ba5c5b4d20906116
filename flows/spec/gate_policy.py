"""Which metrics exist, which way is better, and which of them gate a release at what tolerance.

A release is judged on what it changes: the engine's own work. By default the gate reads the
engine's CPU time per step when the engine reports it (it excludes the moments the machine ran
something else), else the engine's wall time per step, else, for engines that report neither,
every client metric as before. Client-observed times (TTFT, TPOT, tok/s) are always compared
and shown with their intervals; they gate only when a release names them.

A suite may say more for its own workloads (`gate:` on a workload, kept in every arm report):
`false` makes its points reported only, `{metrics, tolerance}` names what gates there and how
much slowdown is allowed. Where a workload says something, the suite wins over the release's
settings for that workload's points; everywhere else the release's settings decide. A suite's
tolerance per metric (`tolerances:` at its top, or on a workload's `gate:`) is the cluster's:
the suite is written for the machine it runs on and knows what its noise lets it resolve.

It lives in `spec` because the release and suite specs check the metric names they are given
against it; the benchmark library reads it from here (specs import nothing above them).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Direction(StrEnum):
    """Which way is better for a metric."""

    HIGHER = "higher"
    LOWER = "lower"


METRICS: dict[str, Direction] = {
    "tps": Direction.HIGHER,
    "decode_window_tps": Direction.HIGHER,
    "per_stream_tps": Direction.HIGHER,
    "output_tps": Direction.HIGHER,
    "prefill_tps": Direction.HIGHER,
    "step_ms": Direction.LOWER,
    "step_geomean_ms": Direction.LOWER,
    "ttft_s": Direction.LOWER,
    "ttft_p50_s": Direction.LOWER,
    "ttft_p99_s": Direction.LOWER,
    "tpot_ms": Direction.LOWER,
    "tpot_p50_ms": Direction.LOWER,
    "tpot_p99_ms": Direction.LOWER,
    "cold_ttft_s": Direction.LOWER,
    "warm_ttft_s": Direction.LOWER,
    "engine_step_ms": Direction.LOWER,
    "engine_cpu_ms": Direction.LOWER,
    "engine_tpot_ms": Direction.LOWER,
    "draft_acceptance_len": Direction.HIGHER,
}
"""Every metric a point may gate on (ours and the recipe's imported ones), and which way is
better."""

KNOWN_METRICS = frozenset(METRICS)
"""Every metric a policy may name."""

ENGINE_LEVEL = ("engine_cpu_ms", "engine_step_ms")
"""Engine-reported step times (ms) in order of preference for the default policy."""


class WorkloadRule(BaseModel):
    """What a suite says about one workload's points (None: the release's settings)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gate: bool = Field(default=True, description="False: the workload's points are reported only")
    metrics: tuple[str, ...] | None = Field(default=None, description="metrics that gate there")
    tolerance_pct: float | None = Field(default=None, description="allowed slowdown there (%)")
    tolerances_pct: Mapping[str, float] = Field(
        default_factory=dict,
        description="allowed slowdown there per metric (%): the workload's own, else the suite's",
    )


class GatePolicy(BaseModel):
    """The metrics that decide the benchmark gate and their tolerances (percent)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metrics: tuple[str, ...] | None = Field(
        default=None, description="metrics that gate; None: the engine-level default"
    )
    tolerances_pct: Mapping[str, float] = Field(
        default_factory=dict, description="per-metric tolerance overriding the gate's (percent)"
    )
    workloads: Mapping[str, WorkloadRule] = Field(
        default_factory=dict, description="the suite's rules per workload name (they win there)"
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

    def with_suite(self, rules: Mapping[str, WorkloadRule]) -> GatePolicy:
        """This policy with a suite's per-workload rules (they win on their workloads)."""
        return self.model_copy(update={"workloads": dict(rules)})

    def gated_at(self, point: str, compared: Collection[str]) -> frozenset[str]:
        """The gating metrics of one point: its workload's rule, else the release's policy."""
        rule = self.workloads.get(point.partition("/")[0])
        if rule is not None and not rule.gate:
            return frozenset()
        if rule is not None and rule.metrics is not None:
            return frozenset(rule.metrics)
        return self.gated(compared)

    def tolerance_at(self, point: str, metric: str, default_pct: float) -> float:
        """A point's tolerance for a metric: the suite's for the metric on that workload, else its
        workload's, else the release's for the metric, else the gate's (see `tolerance_source`)."""
        rule = self.workloads.get(point.partition("/")[0])
        if rule is not None and metric in rule.tolerances_pct:
            return rule.tolerances_pct[metric]
        if rule is not None and rule.tolerance_pct is not None:
            return rule.tolerance_pct
        return self.tolerance_pct(metric, default_pct)
