"""The benchmark gate's session logic on synthetic arms: order, added arms, verdicts, files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.bench.compare import Comparison, SessionDecision, compare_arms
from flows.bench.ledger import Ledger
from flows.bench.report import ArmReport, Point, Sample, write_arm
from flows.bench.runner import suite_digest
from flows.gates.base import GateContext, Outcome
from flows.gates.benchmark import runner as benchmark
from flows.gates.benchmark.recompute import benchmark_problems
from flows.gates.benchmark.rules import (
    LEDGER_FILE,
    Focus,
    Role,
    Session,
    kv_capacity_by_role,
    order_problem,
    points_summary,
    reason_for,
    run_session,
)
from flows.gates.benchmark.runner import finished_arm, run_benchmark
from flows.gates.benchmark.story import kv_capacity_line
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import BenchmarkGate, Release
from flows.spec.suite import Suite
from flows.spec.suites import load_suites

ROOT = Path(__file__).resolve().parents[3]


def arm(label: str, tps: float, ttft: float, spread: float = 0.002) -> ArmReport:
    """One arm with two gated points, three samples each around the given levels."""
    factors = (1 - spread, 1.0, 1 + spread)
    return ArmReport(
        label=label, source="sparkgate", url="http://127.0.0.1:1", suite="tiny",
        started_utc="2026-12-02T00:00:00+00:00",
        points={
            "streams/c2": Point(workload="closed_loop", gate=["tps"],
                                samples=[Sample(metrics={"tps": tps * f}) for f in factors]),
            "single/p": Point(workload="single_stream", gate=["ttft_p50_s"],
                              samples=[Sample(metrics={"ttft_p50_s": ttft * f}) for f in factors]),
        },
    )  # fmt: skip


class Bench:
    """A fake cluster: the level of each arm comes from a list, in the order arms are run."""

    def __init__(self, candidate: list[float], previous: list[float]) -> None:
        self.levels: dict[Role, list[float]] = {"candidate": candidate, "previous": previous}
        self.ran: list[tuple[int, Role]] = []

    def measure(self, index: int, role: Role, focus: Focus = None) -> ArmReport:
        level = self.levels[role][sum(1 for _, r in self.ran if r == role)]
        self.ran.append((index, role))
        report = arm(f"{index}-{role}", tps=100 * level, ttft=0.2 / level)
        if focus is None:
            return report
        return report.model_copy(
            update={"points": {k: v for k, v in report.points.items() if k in focus}}
        )


def compare(new: list[ArmReport], old: list[ArmReport]) -> Comparison:
    return compare_arms(new, old, tolerance_pct=3.0)


FIRST: list[Role] = ["candidate", "previous", "candidate"]


def test_only_alternating_orders_starting_with_the_candidate_are_accepted() -> None:
    assert order_problem(["candidate", "previous", "candidate"]) is None
    assert order_problem(["candidate", "previous", "candidate", "previous", "candidate"]) is None
    problem = order_problem(["previous", "candidate", "candidate"])
    assert problem is not None
    assert "alternate" in problem


def test_a_clearly_slower_candidate_fails_as_slower() -> None:
    bench = Bench(candidate=[0.80] * 7, previous=[1.0] * 7)
    session = run_session(FIRST, 7, bench.measure, compare)
    assert session.decision is SessionDecision.FAIL_SLOWER
    assert session.roles[:3] == FIRST
    rows = points_summary(session)
    assert {row.verdict for row in rows} == {"slower"}
    reason = reason_for(session, 3.0, 7)
    assert reason.startswith("slower beyond 3%")
    assert "streams/c2 tps" in reason


def test_a_level_candidate_passes_and_arms_keep_alternating() -> None:
    bench = Bench(candidate=[1.0, 1.001, 0.999, 1.0], previous=[1.0005, 0.9995, 1.0])
    session = run_session(FIRST, 7, bench.measure, compare)
    assert session.decision is SessionDecision.PASS
    expected = ["candidate" if i % 2 == 0 else "previous" for i in range(len(session.roles))]
    assert session.roles == expected
    assert [index for index, _ in bench.ran] == list(range(1, len(session.roles) + 1))
    assert all(row.verdict in ("level", "faster") for row in points_summary(session))


def test_noise_adds_previous_then_candidate_arms_up_to_max_then_fails_inconclusive() -> None:
    # Boot-to-boot swings of +-15 %: no interval can clear a 3 % tolerance with 5 arms.
    bench = Bench(candidate=[1.0, 0.85, 1.15, 0.9], previous=[1.12, 0.88, 1.0])
    session = run_session(FIRST, 5, bench.measure, compare)
    assert session.decision is SessionDecision.FAIL_INCONCLUSIVE
    assert session.roles == ["candidate", "previous", "candidate", "previous", "candidate"]
    assert "inconclusive after 5 arms (max_arms 5)" in reason_for(session, 3.0, 5)


def test_no_arm_is_added_past_the_time_limit() -> None:
    bench = Bench(candidate=[1.0, 0.85, 1.15], previous=[1.12, 0.88])
    session = run_session(FIRST, 7, bench.measure, compare, may_add=lambda: False)
    assert session.decision is SessionDecision.FAIL_INCONCLUSIVE
    assert session.stopped_early
    assert len(session.roles) == 3
    assert "time limit" in reason_for(session, 3.0, 7)


def test_a_ledger_of_small_aa_gaps_decides_with_the_first_three_arms() -> None:
    ledger = Ledger(
        gaps={"streams/c2:tps": [0.002, -0.001, 0.001], "single/p:ttft_p50_s": [0.001, -0.002]}
    )
    bench = Bench(candidate=[1.0, 1.001], previous=[1.0])
    session = run_session(
        FIRST, 7, bench.measure,
        lambda new, old: compare_arms(new, old, ledger=ledger, tolerance_pct=3.0),
    )  # fmt: skip
    assert session.decision is SessionDecision.PASS
    assert session.roles == FIRST


def _context(tmp_path: Path, previous: Release | None) -> GateContext:
    cluster = load_model(ROOT / "config/local.yaml", Cluster)
    release = load_model(ROOT / "releases/r2.yaml", Release)
    return GateContext(
        cluster=cluster, release=release, previous=previous, transports={},
        state=tmp_path / "state", experiments=tmp_path / "experiments",
    )  # fmt: skip


def test_no_previous_release_skips_with_a_reason(tmp_path: Path) -> None:
    result = run_benchmark(_context(tmp_path, None), BenchmarkGate(), tmp_path / "out")
    assert result.outcome == Outcome.SKIPPED
    assert "no previous release" in result.reason


def test_an_order_the_statistics_cannot_read_fails_before_booting(tmp_path: Path) -> None:
    previous = load_model(ROOT / "releases/r1.yaml", Release)
    settings = BenchmarkGate(arms=["previous", "candidate", "candidate"])
    result = run_benchmark(_context(tmp_path, previous), settings, tmp_path / "out")
    assert result.outcome == Outcome.FAILED
    assert "alternate" in result.reason


def test_run_benchmark_writes_arms_compare_and_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = Bench(candidate=[0.80] * 7, previous=[1.0] * 7)

    def fake_measure(
        context: GateContext,
        suite: object,
        out_dir: Path,
        index: int,
        role: Role,
        focus: Focus = None,
        hygiene: object = None,
    ) -> ArmReport:
        del context, suite, hygiene
        report = bench.measure(index, role, focus)
        folder = benchmark.arm_folder(out_dir, index, role)
        folder.mkdir(parents=True)
        (folder / "arm.json").write_text(report.model_dump_json())
        return report

    monkeypatch.setattr(benchmark, "measure_arm", fake_measure)
    previous = load_model(ROOT / "releases/r1.yaml", Release)
    out = tmp_path / "out"
    settings = BenchmarkGate(suite=str(ROOT / "config/suites/release.yaml"), max_arms=5)
    result = run_benchmark(_context(tmp_path, previous), settings, out)
    assert result.outcome == Outcome.FAILED
    assert result.reason.startswith("slower beyond 3%")
    summary = result.summary_as(BenchmarkSummary)
    assert summary is not None
    assert summary.arms[:3] == FIRST
    assert summary.tolerance == 0.03
    row = summary.points[0].model_dump()
    assert set(row) == {"point", "unit", "higher_is_better", "previous", "candidate", "change",
                        "low", "high", "verdict", "gated", "tolerance_pct"}  # fmt: skip
    by_unit = {r.unit: r for r in summary.points}
    assert by_unit["tps"].candidate == pytest.approx(80.0)
    assert by_unit["tps"].previous == pytest.approx(100.0)
    assert by_unit["tps"].change == pytest.approx(-20.0, abs=0.5)
    assert by_unit["ttft_p50_s"].higher_is_better is False
    for name in ("compare.json", "bench.txt", "changes.png", "aa-gaps.json",
                 "arms/1-candidate/arm.json", "arms/2-previous/arm.json"):  # fmt: skip
        assert name in result.files
        assert (out / name).is_file()
    stored = json.loads((out / "compare.json").read_text())
    assert stored["new"][:2] == ["1-candidate", "3-candidate"]
    assert stored["old"][0] == "2-previous"


def test_the_gate_keeps_the_ledger_it_drew_on_and_verify_recomputes_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ledger-used.json holds the ledger the session used, so the figures can be recomputed."""
    bench = Bench(candidate=[1.05] * 7, previous=[1.0] * 7)

    def fake_measure(
        context: GateContext, suite: object, out_dir: Path, index: int, role: Role,
        focus: Focus = None, hygiene: object = None,
    ) -> ArmReport:  # fmt: skip
        del context, suite, hygiene
        report = bench.measure(index, role, focus)
        write_arm(report, benchmark.arm_folder(out_dir, index, role))
        return report

    monkeypatch.setattr(benchmark, "measure_arm", fake_measure)
    ledger = Ledger(gaps={"streams/c2:tps": [0.004, -0.003]}, sessions=["a / b", "c / d"])
    previous = load_model(ROOT / "releases/r1.yaml", Release)
    out = tmp_path / "out"
    settings = BenchmarkGate(suite=str(ROOT / "config/suites/release.yaml"), max_arms=5)
    result = benchmark.run_gate(benchmark.BENCHMARK, _context(tmp_path, previous), settings,
                                ledger, out)  # fmt: skip
    summary = result.summary_as(BenchmarkSummary)
    assert summary is not None
    assert summary.ledger_gaps == 2
    assert LEDGER_FILE in result.files
    assert Ledger.model_validate_json((out / LEDGER_FILE).read_text()) == ledger
    assert benchmark_problems(out, summary, settings.max_arms) == []


def test_the_slower_release_is_r1_with_a_slowdown_beyond_its_tolerance_and_at_most_twice_it() -> (
    None
):
    slower = load_model(ROOT / "releases/faulty/slower.yaml", Release)
    r1 = load_model(ROOT / "releases/r1.yaml", Release)
    assert slower.previous == "r1"
    assert slower.engine.env == {"SPARKENGINE_FAULT_SLOWDOWN": "0.30"}
    assert slower.engine.options == r1.engine.options
    assert slower.build == r1.build  # same build: the switch is the only difference
    assert slower.outputs.change == "unchanged"
    gate = slower.gates.benchmark
    assert gate.enabled
    assert gate.tolerance == 0.03  # the default of metrics its suite names no tolerance for
    assert order_problem(gate.arms) is None
    # judged at its suite's engine CPU tolerance (this machine's, docs/statistics.md)
    judged = load_suites(gate.suites()).tolerances["engine_cpu_ms"]
    slowdown = float(slower.engine.env["SPARKENGINE_FAULT_SLOWDOWN"])
    assert judged < slowdown <= 2 * judged


def _suite(samples: int) -> Suite:
    return Suite.model_validate({
        "kind": "suite", "name": "tiny", "seed": 0, "samples": samples,
        "workloads": [{"kind": "single_stream", "name": "single"}],
    })  # fmt: skip


def _finished(release: str, role: Role, suite: Suite) -> ArmReport:
    identity = {"release": release, "role": role, "suite_sha256": suite_digest(suite)}
    return arm("1-candidate", tps=100, ttft=0.2).model_copy(
        update={"identity": identity, "finished_utc": "2026-12-02T00:01:00+00:00"}
    )


def test_an_arm_the_interrupted_run_finished_is_kept(tmp_path: Path) -> None:
    suite = _suite(3)
    write_arm(_finished("r2", "candidate", suite), tmp_path)
    kept = finished_arm(tmp_path, "r2", "candidate", suite)
    assert kept is not None
    assert kept.identity["release"] == "r2"


@pytest.mark.parametrize(
    ("release", "role", "samples", "aborted"),
    [("r1", "candidate", 3, None), ("r2", "previous", 3, None), ("r2", "candidate", 5, None),
     ("r2", "candidate", 3, "client gave up")],
    ids=["other-release", "other-role", "other-suite", "aborted"],
)  # fmt: skip
def test_an_arm_of_anything_else_is_measured_again(
    tmp_path: Path, release: str, role: Role, samples: int, aborted: str | None
) -> None:
    report = _finished(release, role, _suite(samples)).model_copy(update={"aborted": aborted})
    write_arm(report, tmp_path)
    assert finished_arm(tmp_path, "r2", "candidate", _suite(3)) is None


def test_a_missing_or_unreadable_arm_is_measured_again(tmp_path: Path) -> None:
    assert finished_arm(tmp_path, "r2", "candidate", _suite(3)) is None
    (tmp_path / "arm.json").write_text("{half")
    assert finished_arm(tmp_path, "r2", "candidate", _suite(3)) is None


def test_added_arms_measure_only_the_points_still_undecided() -> None:
    # single/p is clearly faster from the first three arms; streams/c2 swings by 20 % per boot.
    swings = iter([1.0, 1.2, 0.8, 1.15, 0.85, 1.1, 0.9])
    focuses: list[frozenset[str] | None] = []

    def measure(index: int, role: Role, focus: Focus) -> ArmReport:
        focuses.append(focus)
        level = 0.8 if role == "candidate" else 1.0
        report = arm(f"{index}-{role}", tps=100 * next(swings), ttft=0.2 * level)
        if focus is None:
            return report
        return report.model_copy(
            update={"points": {k: v for k, v in report.points.items() if k in focus}}
        )

    session = run_session(FIRST, 5, measure, compare)

    assert focuses[:3] == [None, None, None]
    assert focuses[3:] == [frozenset({"streams/c2"})] * 2
    assert all(set(r.points) == {"streams/c2"} for r in session.reports[3:])
    rows = {row.point: row for row in session.comparison.points}
    assert rows["single/p"].verdict.value == "faster"
    assert rows["single/p"].arms is not None
    assert rows["single/p"].arms.arms == 3  # decided on the first session's arms
    assert rows["streams/c2"].arms is not None
    assert rows["streams/c2"].arms.arms == 5


def test_kv_capacity_is_reported_per_role_as_the_smallest_any_arm_saw() -> None:
    """A candidate that leaves less memory for the cache shows it, beside the verdicts."""
    reports = [
        arm(f"{i}", 100.0, 0.2).model_copy(update={"identity": {"kv_capacity_tokens": tokens}})
        for i, tokens in enumerate([983040, 1048576, 983552])
    ]
    roles: list[Role] = ["candidate", "previous", "candidate"]
    session = Session(roles, reports, compare(reports[::2], reports[1:2]), SessionDecision.PASS)
    capacity = kv_capacity_by_role(session)
    assert capacity == {"previous": 1048576.0, "candidate": 983040.0}
    assert kv_capacity_line(capacity) == (
        "KV cache capacity (engine-reported, not gated): previous 1,048,576 tokens, "
        "candidate 983,040 tokens (-6.2%)."
    )
    plain = Session(roles, [arm(f"{i}", 100.0, 0.2) for i in range(3)], session.comparison,
                    SessionDecision.PASS)  # fmt: skip
    assert kv_capacity_by_role(plain) == {}  # an engine that exports none: nothing claimed
