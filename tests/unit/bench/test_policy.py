"""The gate policy: engine-level step times decide by default, client metrics are reported."""

from __future__ import annotations

import pytest

from flows.bench.compare import compare_arms
from flows.bench.report import ArmReport, Point, Sample, higher_is_better
from flows.bench.runner import compared_metrics
from flows.engine_api.metrics import draft_acceptance, engine_step_times, scrape_names
from flows.errors import BenchError, SpecError
from flows.spec.gate_policy import GatePolicy
from flows.spec.release import BenchmarkGate


def arm(label: str, cpu_ms: float | None, tpot_ms: float) -> ArmReport:
    """One single-stream point with a client TPOT and, if given, the engine's CPU per step."""
    samples = []
    for factor in (0.999, 1.0, 1.001):
        metrics = {"tpot_p50_ms": tpot_ms * factor}
        if cpu_ms is not None:
            metrics["engine_cpu_ms"] = cpu_ms * factor
        samples.append(Sample(metrics=metrics))
    gate = ["tpot_p50_ms", *(["engine_cpu_ms"] if cpu_ms is not None else [])]
    return ArmReport(
        label=label, source="sparkgate", url="http://127.0.0.1:1", suite="tiny",
        started_utc="2026-12-03T00:00:00+00:00",
        points={"single/c1": Point(workload="single_stream", gate=gate, samples=samples)},
    )  # fmt: skip


def test_the_default_gates_on_the_engine_cpu_time_when_the_engine_reports_it() -> None:
    assert GatePolicy().gated({"tpot_p50_ms", "engine_step_ms", "engine_cpu_ms"}) == {
        "engine_cpu_ms"
    }
    assert GatePolicy().gated({"tpot_p50_ms", "engine_step_ms"}) == {"engine_step_ms"}
    assert GatePolicy().gated({"tpot_p50_ms", "tps"}) == {"tpot_p50_ms", "tps"}
    assert GatePolicy(metrics=("tps",)).gated({"tps", "engine_cpu_ms"}) == {"tps"}


def test_a_noisy_client_metric_is_reported_while_the_engine_decides() -> None:
    # The client saw 30 % swings between boots (scheduler noise); the engine's CPU did not move.
    new = [arm("C1", 10.0, 20.0), arm("C2", 10.0, 14.0)]
    old = [arm("P1", 10.0, 18.0)]
    comparison = compare_arms(new, old, tolerance_pct=3.0)
    rows = {row.metric: row for row in comparison.points}
    assert rows["engine_cpu_ms"].gated
    assert not rows["tpot_p50_ms"].gated
    assert rows["engine_cpu_ms"].verdict.value == "level"
    assert rows["tpot_p50_ms"].verdict.value == "inconclusive"
    assert comparison.inconclusive == []
    assert comparison.regressions == []


def test_a_slower_engine_is_slower_even_when_the_client_metric_is_level() -> None:
    new = [arm("C1", 10.5, 18.0), arm("C2", 10.5, 18.0)]
    old = [arm("P1", 10.0, 18.0)]
    comparison = compare_arms(new, old, tolerance_pct=3.0)
    assert [row.metric for row in comparison.regressions] == ["engine_cpu_ms"]


def test_a_candidate_that_stops_reporting_the_gated_metric_lost_it() -> None:
    comparison = compare_arms(
        [arm("C1", None, 18.0), arm("C2", None, 18.0)], [arm("P1", 10.0, 18.0)], tolerance_pct=3.0
    )
    assert comparison.missing == ["single/c1 engine_cpu_ms"]
    assert comparison.failed


def test_a_metric_tolerance_overrides_the_gates() -> None:
    new = [arm("C1", 10.5, 18.0), arm("C2", 10.5, 18.0)]
    old = [arm("P1", 10.0, 18.0)]
    policy = GatePolicy(tolerances_pct={"engine_cpu_ms": 10.0})
    comparison = compare_arms(new, old, tolerance_pct=3.0, policy=policy)
    assert comparison.regressions == []
    assert comparison.inconclusive == []


def test_engine_step_times_are_the_mean_per_step_between_two_scrapes() -> None:
    names = scrape_names({"running": "r", "step_seconds": "s", "step_cpu_seconds": "c"})
    assert names == {
        "running": "r",
        "step_seconds_sum": "s_sum",
        "step_seconds_count": "s_count",
        "step_cpu_seconds_sum": "c_sum",
        "step_cpu_seconds_count": "c_count",
    }
    before = {"step_seconds_sum": 1.0, "step_seconds_count": 10, "step_cpu_seconds_sum": 0.8}
    after = {"step_seconds_sum": 1.5, "step_seconds_count": 20, "step_cpu_seconds_sum": 1.2}
    assert engine_step_times(before, after) == pytest.approx(
        {"engine_step_ms": 50.0, "engine_cpu_ms": 40.0}
    )
    assert engine_step_times(before, before) == {}
    assert engine_step_times({}, {}) == {}


def test_vllm_reports_its_step_interval_and_its_time_per_token_under_their_own_names() -> None:
    """vLLM observes inter-token latency once per step that gave a request tokens (a DSpark step
    gives several) and time per output token once per finished request; the first is the step
    time, the second is reported as engine_tpot_ms and never gates by default."""
    profile = {
        "running": "vllm:num_requests_running",
        "step_seconds": "vllm:inter_token_latency_seconds",
        "token_seconds": "vllm:request_time_per_output_token_seconds",
    }
    assert scrape_names(profile)["token_seconds_count"] == (
        "vllm:request_time_per_output_token_seconds_count"
    )
    # one request of 97 output tokens in 32 steps of 30 ms: 3 tokens per step, 10 ms per token
    before = {"step_seconds_sum": 0.0, "step_seconds_count": 0, "token_seconds_sum": 0.0,
              "token_seconds_count": 0}  # fmt: skip
    after = {"step_seconds_sum": 0.96, "step_seconds_count": 32, "token_seconds_sum": 0.010,
             "token_seconds_count": 1}  # fmt: skip
    times = engine_step_times(before, after)
    assert times == pytest.approx({"engine_step_ms": 30.0, "engine_tpot_ms": 10.0})
    sample = Sample(metrics={"tps": 1.0, **times})
    compared = compared_metrics("closed_loop", [sample])
    assert compared == ["tps", "engine_step_ms", "engine_tpot_ms"]
    assert GatePolicy().gated(compared) == {"engine_step_ms"}
    assert not higher_is_better("engine_tpot_ms")


def test_a_release_naming_an_unknown_metric_is_refused() -> None:
    with pytest.raises((SpecError, ValueError), match="unknown metric 'tokens_per_joule'"):
        BenchmarkGate(gate_metrics=["tokens_per_joule"])
    assert BenchmarkGate(gate_metrics=["tps"], tolerances={"tps": 0.05}).policy() == GatePolicy(
        metrics=("tps",), tolerances_pct={"tps": 5.0}
    )


def test_draft_acceptance_is_tokens_per_verification_step_between_two_scrapes() -> None:
    """Under DSpark a time per output token mixes in drafting: acceptance is reported beside."""
    before = {"spec_drafts": 100.0, "spec_accepted_tokens": 150.0}
    after = {"spec_drafts": 300.0, "spec_accepted_tokens": 550.0}
    assert draft_acceptance(before, after) == pytest.approx({"draft_acceptance_len": 3.0})
    assert draft_acceptance(before, before) == {}  # nothing drafted in between
    assert draft_acceptance({}, {}) == {}  # an engine that does not draft
    assert higher_is_better("draft_acceptance_len")
    sample = Sample(metrics={"tps": 1.0, "engine_cpu_ms": 2.0, "draft_acceptance_len": 2.5})
    assert compared_metrics("closed_loop", [sample]) == [
        "tps", "engine_cpu_ms", "draft_acceptance_len"
    ]  # fmt: skip
    assert GatePolicy().gated(compared_metrics("closed_loop", [sample])) == {"engine_cpu_ms"}


def suite_arm(label: str, cpu_ms: float, tpot_ms: float, gates: dict[str, object]) -> ArmReport:
    """Two points (single, poisson) of a suite whose workloads say `gates` (kept in the arm)."""
    one = arm(label, cpu_ms, tpot_ms)
    point = one.points["single/c1"]
    workloads = [{"kind": "single_stream", "name": n, "gate": g} for n, g in gates.items()]
    return one.model_copy(
        update={
            "points": {"single/c1": point, "poisson/r1": point},
            "workload": {"name": "tiny", "workloads": workloads},
        }
    )


def test_a_workload_with_gate_false_is_reported_and_the_others_still_gate() -> None:
    """The noisy Poisson point's slowdown is shown but cannot fail or stall the gate."""
    gates: dict[str, object] = {"single": True, "poisson": False}
    new = [suite_arm("C1", 10.0, 20.0, gates), suite_arm("C2", 10.0, 20.0, gates)]
    old = [suite_arm("P1", 9.0, 20.0, gates)]
    comparison = compare_arms(new, old, tolerance_pct=3.0)
    gating = {(row.point, row.metric) for row in comparison.gating}
    assert gating == {("single/c1", "engine_cpu_ms")}
    poisson = [row for row in comparison.points if row.point == "poisson/r1"]
    assert poisson
    assert not any(row.gated for row in poisson)
    assert [row.point for row in comparison.regressions] == ["single/c1"]


def test_a_workload_rule_names_its_metrics_and_tolerance_and_wins_over_the_release() -> None:
    """The suite's rule decides its points; the release's settings decide the rest."""
    gates: dict[str, object] = {"single": True, "poisson": {"metrics": ["tpot_p50_ms"],
                                                           "tolerance": 0.2}}  # fmt: skip
    new = [suite_arm("C1", 10.0, 22.0, gates), suite_arm("C2", 10.0, 22.0, gates)]
    old = [suite_arm("P1", 10.0, 20.0, gates)]
    release = GatePolicy.of_settings(["engine_cpu_ms"], {"tpot_p50_ms": 0.01})
    comparison = compare_arms(new, old, tolerance_pct=3.0, policy=release)
    gating = {(row.point, row.metric) for row in comparison.gating}
    assert gating == {("single/c1", "engine_cpu_ms"), ("poisson/r1", "tpot_p50_ms")}
    rows = {(row.point, row.metric): row for row in comparison.points}
    assert rows[("poisson/r1", "tpot_p50_ms")].verdict.value == "level"  # 10 % < 20 %
    assert rows[("single/c1", "tpot_p50_ms")].verdict.value == "slower"  # reported only
    assert comparison.regressions == []


def test_a_policy_that_gates_nothing_is_an_error_not_a_pass() -> None:
    gates: dict[str, object] = {"single": False, "poisson": False}
    new = [suite_arm("C1", 10.0, 20.0, gates), suite_arm("C2", 10.0, 20.0, gates)]
    old = [suite_arm("P1", 20.0, 40.0, gates)]
    with pytest.raises(BenchError, match="no compared point has a gating metric"):
        compare_arms(new, old, tolerance_pct=3.0)
