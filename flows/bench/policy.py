"""Which compared metrics gate a release, and at what tolerance; every other one is reported.

A release is judged on what it changes: the engine's own work. By default the gate reads the
engine's CPU time per step when the engine reports it (it excludes the moments the machine ran
something else), else the engine's wall time per step, else, for engines that report neither,
every client metric as before. Client-observed times (TTFT, TPOT, tok/s) are always compared
and shown with their intervals; they gate only when a release names them.

A suite may say more for its own workloads (`gate:` on a workload, kept in every arm report):
`false` makes its points reported only, `{metrics, tolerance}` names what gates there and how
much slowdown is allowed. Where a workload says something, the suite wins over the release's
settings for that workload's points; everywhere else the release's settings decide.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from flows.bench.report import METRICS, ArmReport

ENGINE_LEVEL = ("engine_cpu_ms", "engine_step_ms")
"""Engine-reported step times (ms) in order of preference for the default policy."""

DRAFT_ACCEPTANCE = "draft_acceptance_len"
"""Tokens per verification step under speculative decoding: reported beside the times (a
release that drafts worse shows here), gated only when a release names it."""

ENGINE_TPOT = "engine_tpot_ms"
"""The engine's own time per output token (vLLM's per-request figure): reported beside the step
times, gated only when a release names it (under drafting it mixes in the acceptance length)."""

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


class WorkloadRule(BaseModel):
    """What a suite says about one workload's points (None: the release's settings)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gate: bool = Field(default=True, description="False: the workload's points are reported only")
    metrics: tuple[str, ...] | None = Field(default=None, description="metrics that gate there")
    tolerance_pct: float | None = Field(default=None, description="allowed slowdown there (%)")


def _rule(raw: JsonValue) -> WorkloadRule | None:
    """The rule of one workload's `gate:` as an arm report keeps it (None: nothing said)."""
    if raw is False:
        return WorkloadRule(gate=False)
    if not isinstance(raw, dict):
        return None
    metrics, tolerance = raw.get("metrics"), raw.get("tolerance")
    return WorkloadRule(
        metrics=tuple(str(m) for m in metrics) if isinstance(metrics, list) else None,
        tolerance_pct=100 * float(tolerance) if isinstance(tolerance, int | float) else None,
    )


def suite_entries(arm: ArmReport) -> list[dict[str, JsonValue]]:
    """The named workload entries of the suite an arm report ran (none for other tools' arms)."""
    workloads = arm.workload.get("workloads")
    return [
        entry
        for entry in (workloads if isinstance(workloads, list) else [])
        if isinstance(entry, dict) and isinstance(entry.get("name"), str)
    ]


def workload_rules(arm: ArmReport) -> dict[str, WorkloadRule]:
    """The suite's per-workload gate rules, read from the suite an arm report ran.

    Read from the arm (not the release) so the gate, `verify` and `bench compare` recompute
    the same decision from the same files. Arms of other tools (the recipe's reports) say
    nothing, and the release's settings decide every point.
    """
    rules: dict[str, WorkloadRule] = {}
    for entry in suite_entries(arm):
        rule = _rule(entry.get("gate", True))
        if rule is not None:
            rules[str(entry["name"])] = rule
    return rules


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
        """A point's tolerance for a metric: its workload's, else the metric's, else the gate's."""
        rule = self.workloads.get(point.partition("/")[0])
        if rule is not None and rule.tolerance_pct is not None:
            return rule.tolerance_pct
        return self.tolerance_pct(metric, default_pct)
