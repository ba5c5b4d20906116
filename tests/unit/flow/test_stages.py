"""Stage order, cache keys and the overall verdict of a qualification."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel

from flows.gates.base import GateResult, Outcome
from flows.pipeline.stages import GATES, QUALIFIED, gate_cache_key, verdict
from flows.stages import STAGES


class _Settings(BaseModel):
    prompts: int = 8


def _result(gate: str, outcome: Outcome, reason: str = "why") -> GateResult:
    return GateResult(
        gate=gate, outcome=outcome, reason=reason, started_at=datetime.now(UTC), seconds=1.0
    )


def test_gates_run_in_the_release_order() -> None:
    assert GATES == ("release_tests", "determinism", "cold_boots", "benchmark")
    assert STAGES.index("distribute") < STAGES.index("release_tests")
    assert STAGES[-2:] == ("verdict", "record")


def test_cache_key_changes_with_every_input() -> None:
    cluster = _Settings(prompts=1)
    base = {"build_digest": "a" * 64, "cluster": cluster, "settings": _Settings(), "record": "r"}
    key = gate_cache_key("determinism", **base)  # type: ignore[arg-type]
    assert key == gate_cache_key("determinism", **base)  # type: ignore[arg-type]
    changed = [
        gate_cache_key("cold_boots", **base),  # type: ignore[arg-type]
        gate_cache_key("determinism", **{**base, "build_digest": "b" * 64}),  # type: ignore[arg-type]
        gate_cache_key("determinism", **{**base, "settings": _Settings(prompts=9)}),  # type: ignore[arg-type]
        gate_cache_key("determinism", **{**base, "record": "r-2"}),  # type: ignore[arg-type]
        gate_cache_key("determinism", **base, extra={"previous": "r0"}),  # type: ignore[arg-type]
    ]
    assert key not in changed
    assert len(set(changed)) == len(changed)


def test_verdict_names_the_first_failed_gate() -> None:
    results = {gate: _result(gate, Outcome.PASSED) for gate in GATES}
    assert verdict(results) == (QUALIFIED, None)
    results["cold_boots"] = _result("cold_boots", Outcome.FAILED, "2 compiles after preparation")
    results["benchmark"] = _result("benchmark", Outcome.FAILED, "slower")
    text, gate = verdict(results)
    assert gate == "cold_boots"
    assert text == "failed at cold_boots: 2 compiles after preparation"


def test_skipped_gates_do_not_fail_but_missing_ones_are_incomplete() -> None:
    results = {gate: _result(gate, Outcome.PASSED) for gate in GATES}
    results["benchmark"] = _result("benchmark", Outcome.SKIPPED, "no previous release")
    assert verdict(results) == (QUALIFIED, None)
    del results["benchmark"]
    assert verdict(results) == ("incomplete: benchmark not run", "benchmark")
