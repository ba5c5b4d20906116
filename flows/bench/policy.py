"""What the benchmark compares beside the gate, and the suite's gate rules as an arm keeps them.

The gate policy itself (which metrics gate, at what tolerance) is a spec's business and lives in
`flows.spec.gate_policy`; here are the client metrics compared for each workload kind, the
engine figures reported beside them, and the reading of a suite's per-workload `gate:` from an
arm report, so the gate, `verify` and `bench compare` decide from the same files.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import JsonValue

from flows.bench.report import ArmReport
from flows.spec.gate_policy import WorkloadRule

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
    "session": ["ttft_s", "tpot_ms"],
}
"""The client-observed metrics compared for each workload kind."""


def _percents(raw: JsonValue) -> dict[str, float]:
    """Per-metric tolerances (fractions) as percents; anything else is none."""
    if not isinstance(raw, dict):
        return {}
    return {str(k): 100 * float(v) for k, v in raw.items() if isinstance(v, int | float)}


def _rule(raw: JsonValue, suite_tolerances: dict[str, float]) -> WorkloadRule | None:
    """The rule of one workload's `gate:` as an arm report keeps it, with its suite's per-metric
    tolerances where the workload names no tolerance of its own (None: nothing said)."""
    if raw is False:
        return WorkloadRule(gate=False)
    if not isinstance(raw, dict):
        return WorkloadRule(tolerances_pct=suite_tolerances) if suite_tolerances else None
    metrics, tolerance = raw.get("metrics"), raw.get("tolerance")
    own = _percents(raw.get("tolerances"))
    inherited = suite_tolerances if not isinstance(tolerance, int | float) else {}
    return WorkloadRule(
        metrics=tuple(str(m) for m in metrics) if isinstance(metrics, list) else None,
        tolerance_pct=100 * float(tolerance) if isinstance(tolerance, int | float) else None,
        tolerances_pct={**inherited, **own},
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
    return suite_rules(arm.workload)


def suite_rules(suite: Mapping[str, JsonValue]) -> dict[str, WorkloadRule]:
    """The per-workload gate rules of a suite as dumped (an arm's copy, or a Suite's dump)."""
    tolerances = _percents(suite.get("tolerances"))
    workloads = suite.get("workloads")
    rules: dict[str, WorkloadRule] = {}
    for entry in workloads if isinstance(workloads, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        rule = _rule(entry.get("gate", True), tolerances)
        if rule is not None:
            rules[str(entry["name"])] = rule
    return rules
