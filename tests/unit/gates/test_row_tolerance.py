"""The benchmark's reason and headline name the tolerance the rows were decided at: the suite's."""

from __future__ import annotations

from flows.bench.compare import Comparison, SessionDecision, compare_arms
from flows.bench.report import ArmReport, Point, Sample
from flows.gates.benchmark.rules import Role, reason_for, run_session
from flows.gates.benchmark.story import rows_tolerance
from flows.gates.benchmark.summary import PointRow

SUITE = {"name": "tiny", "tolerances": {"engine_cpu_ms": 0.15},
         "workloads": [{"kind": "step_grid", "name": "step", "gate": True}]}  # fmt: skip


def _arm(index: int, role: Role, level: float) -> ArmReport:
    factors = (0.998, 1.0, 1.002)
    return ArmReport(
        label=f"{index}-{role}", source="sparkgate", url="http://127.0.0.1:1", suite="tiny",
        started_utc="2026-12-02T00:00:00+00:00", workload=SUITE,
        points={"step/grid": Point(workload="step_grid", gate=["engine_cpu_ms"],
                                   samples=[Sample(metrics={"engine_cpu_ms": 2.0 * level * f})
                                            for f in factors])},
    )  # fmt: skip


def _compare(new: list[ArmReport], old: list[ArmReport]) -> Comparison:
    return compare_arms(new, old, tolerance_pct=3.0, looks=5)


def _session(candidate: float) -> tuple[SessionDecision, str]:
    levels = {"candidate": candidate, "previous": 1.0}
    session = run_session(
        ["candidate", "previous", "candidate"], 7,
        lambda index, role, _focus: _arm(index, role, levels[role]), _compare,
    )  # fmt: skip
    return session.decision, reason_for(session, 3.0, 7)


def test_a_slower_release_is_slower_beyond_the_suites_tolerance_not_the_releases() -> None:
    decision, reason = _session(1.30)
    assert decision is SessionDecision.FAIL_SLOWER
    assert reason.startswith("slower beyond 15%: step/grid engine_cpu_ms +30.0%"), reason


def test_a_loss_inside_the_suites_tolerance_passes_and_says_at_which() -> None:
    decision, reason = _session(1.05)  # beyond the release's 3 %, inside the suite's 15 %
    assert decision is SessionDecision.PASS
    assert reason.startswith("no point slower than 15% in engine_cpu_ms"), reason


def test_rows_at_several_tolerances_show_their_range() -> None:
    def row(tolerance: float | None) -> PointRow:
        return PointRow(point="p", unit="engine_cpu_ms", higher_is_better=False, previous=1.0,
                        candidate=1.0, change=0.0, low=-1.0, high=1.0, verdict="level",
                        gated=True, tolerance_pct=tolerance)  # fmt: skip

    assert rows_tolerance([row(15.0), row(15.0)], 0.03) == "15%"
    assert rows_tolerance([row(None), row(15.0)], 0.03) == "3-15%"
    assert rows_tolerance([], 0.03) == "3%"
