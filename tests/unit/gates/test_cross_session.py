"""An irreversible host change (a new kernel): the candidate's arms on the changed hosts against
the previous release's recorded arms, by the cross-session rule, whose wider interval the
record states and `verify` recomputes from the stage's own files.

The local cluster's nodes carry the change already (a sysfs-like `knob` at 1, read by the
cluster's real fact probe through the local transport); the arms' measurements are synthetic.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from flows.bench.report import ArmReport, write_arm
from flows.bench.stats import look_alpha
from flows.cluster.ops.host_layers import host_layers_on
from flows.errors import ClusterError, MissingPreviousError, SpecError
from flows.gates.base import GateContext, Outcome, RecordedArms
from flows.gates.benchmark import runner as benchmark
from flows.gates.benchmark.cross_rules import RULE, estimate
from flows.gates.benchmark.recompute import benchmark_problems
from flows.gates.benchmark.story import cross_session_line
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.pipeline.gate_loop import RecordHistory
from flows.pipeline.inputs import QualificationInputs, load_inputs
from flows.pipeline.previous import require_recorded_arms
from flows.record.writer import open_record
from flows.spec.load import load_model
from flows.spec.release import BenchmarkGate, Release
from tests.support.paths import ROOT
from tests.support.records import DAY, fill
from tests.unit.cluster.test_host_layers import _cluster_file, _transports, release_file
from tests.unit.gates.test_benchmark_session import arm

KERNEL: dict[str, Any] = {
    "name": "kernel-next",
    "description": "a new kernel, already booted on every node",
    "reversible": False,
    "facts": {"knob": {"at_least": 1}},
}


def _inputs(tmp_path: Path, allowance: float | None = 2.0) -> QualificationInputs:
    cluster = _cluster_file(tmp_path)
    for folder in ("local0", "local1"):
        (tmp_path / folder / "knob").write_text("1\n")  # the change is on the nodes
    gates = {"benchmark": {"cross_session_allowance_pct": allowance}}
    return load_inputs(release_file(tmp_path, KERNEL, gates=gates), cluster)


def _recorded(tmp_path: Path, level: float = 1.0, arms: int = 2) -> RecordedArms:
    folders = []
    for index in range(1, arms + 1):
        folder = tmp_path / "2026-12-01-r2" / "benchmark" / "arms" / f"{2 * index - 1}-candidate"
        write_arm(arm(f"{index}-candidate", tps=100 * level, ttft=0.2 / level), folder)
        folders.append(folder)
    return RecordedArms("2026-12-01-r2", folders)


def _gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: float, recorded: RecordedArms | None
) -> tuple[Any, list[str], Path]:
    inputs = _inputs(tmp_path)
    booted: list[str] = []

    def start(_cluster: object, release: Release, *_a: object, **_k: object) -> object:
        booted.append(release.name)
        return SimpleNamespace(wall_s=0.1, session=SimpleNamespace(build="b" * 64))

    def run_arm(endpoint: object, suite: object, *, label: str, **_: object) -> ArmReport:
        del endpoint, suite
        return arm(label, tps=100 * level, ttft=0.2 / level)

    monkeypatch.setattr(benchmark, "start_release", start)
    monkeypatch.setattr(benchmark, "stop_session", lambda *_a, **_k: None)
    monkeypatch.setattr(benchmark, "run_arm", run_arm)
    context = GateContext(
        cluster=inputs.cluster, release=inputs.release, previous=inputs.previous,
        transports=dict(_transports(inputs.cluster)), state=tmp_path / "state",
        experiments=tmp_path / "experiments",
    )  # fmt: skip
    settings = inputs.release.gates.benchmark.model_copy(
        update={"suite": str(ROOT / "config/suites/release.yaml"), "max_arms": 4}
    )
    out = tmp_path / "out"
    with host_layers_on(inputs.cluster, inputs.release.host, context.transports) as host:
        context = GateContext(**{**context.__dict__, "host": host})
        result = benchmark.run_benchmark(context, settings, out, recorded=recorded)
    return result, booted, out


def test_an_irreversible_change_is_compared_with_the_recorded_arms_and_says_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, booted, out = _gate(tmp_path, monkeypatch, 1.10, _recorded(tmp_path))
    summary = result.summary_as(BenchmarkSummary)
    assert summary is not None, result.reason
    assert result.outcome is Outcome.PASSED, result.reason
    assert booted == ["r3", "r3"]  # no previous arm is run on the changed hosts
    assert summary.arms == ["candidate", "candidate"]
    cross = summary.cross_session
    assert cross is not None
    assert (cross.rule, cross.allowance_pct, cross.record) == (RULE, 2.0, "2026-12-01-r2")
    assert cross.recorded_arms == ["recorded-1-previous", "recorded-2-previous"]
    assert (out / "arms" / "recorded-2-previous" / "arm.json").is_file()
    tps = next(row for row in summary.points if row.unit == "tps")
    assert tps.verdict == "faster"
    assert tps.change == pytest.approx(10.0)
    assert (tps.low, tps.high) == (pytest.approx(8.0), pytest.approx(12.0))  # +-2 % stated
    assert benchmark_problems(out, summary, 4) == []
    assert summary.looks == 3  # after 2 candidate arms, then after each of 2 more (max_arms 4)
    compared = json.loads((out / "compare.json").read_text())
    assert {row["arms"]["alpha"] for row in compared["points"]} == {look_alpha(3)}
    assert cross_session_line(summary) == (
        "Compared across sessions (the hosts changed irreversibly): the previous release's 2 "
        "arms of record `2026-12-01-r2` (kept under arms/recorded-*); " + RULE + ": 2 % on each "
        "side."
    )


def test_the_allowance_keeps_a_small_slowdown_from_passing_across_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1.5 % slower passes a 3 % tolerance in one session; across sessions, widened by 2 %, the
    interval reaches -3.5 %: candidate arms are added up to max_arms, then inconclusive."""
    result, booted, out = _gate(tmp_path, monkeypatch, 0.985, _recorded(tmp_path))
    summary = result.summary_as(BenchmarkSummary)
    assert summary is not None, result.reason
    assert result.outcome is Outcome.INCONCLUSIVE, result.reason
    assert booted == ["r3"] * 4
    assert summary.decision == "fail-inconclusive"
    tps = next(row for row in summary.points if row.unit == "tps")
    assert tps.low == pytest.approx(-3.5)
    assert benchmark_problems(out, summary, 4) == []


def test_without_recorded_arms_the_gate_fails_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, booted, _out = _gate(tmp_path, monkeypatch, 1.0, None)
    assert result.outcome is Outcome.FAILED
    assert booted == []
    assert result.reason == (
        "r3 changes the hosts irreversibly, so its arms are compared with r2's arms of its "
        "newest published record on tp2-local, and there is none with benchmark arms: qualify "
        "r2 on this shape before the change"
    )


def test_an_irreversible_layer_needs_its_allowance_stated(tmp_path: Path) -> None:
    file = release_file(tmp_path, KERNEL)
    with pytest.raises(SpecError, match=r"gates.benchmark.cross_session_allowance_pct: an "
                       r"irreversible host layer is compared"):  # fmt: skip
        load_model(file, Release)


def test_an_irreversible_layer_whose_facts_do_not_hold_stops_the_run(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path)
    (tmp_path / "local1" / "knob").write_text("0\n")  # this node still runs the old kernel
    with (
        pytest.raises(ClusterError, match=r"local1: kernel-next found: knob is 0, expected at "
                      r"least 1"),
        host_layers_on(inputs.cluster, inputs.release.host, _transports(inputs.cluster)),
    ):  # fmt: skip
        pytest.fail("the body must not run")


def test_the_cross_session_estimate_pools_both_sessions_and_widens_by_the_allowance() -> None:
    same = estimate([100.0, 100.0], [100.0, 100.0], higher_is_better=True, gaps=[],
                    tolerance_pct=3.0, allowance_pct=1.0)  # fmt: skip
    assert (same.low_pct, same.high_pct, same.verdict.value) == (-1.0, 1.0, "level")
    noisy = estimate([102.0, 98.0], [100.0], higher_is_better=True, gaps=[0.02],
                     tolerance_pct=3.0, allowance_pct=1.0)  # fmt: skip
    assert noisy.boot_df == 2  # one from today's two arms, none from one recorded arm, a gap
    assert noisy.low_pct is not None
    assert noisy.boot_low_pct is not None
    assert noisy.low_pct == pytest.approx(noisy.boot_low_pct - 1.0)
    alone = estimate([100.0], [100.0], higher_is_better=True, gaps=[], tolerance_pct=3.0,
                     allowance_pct=1.0)  # fmt: skip
    assert (alone.low_pct, alone.verdict.value) == (None, "inconclusive")


def test_r1_and_r2_change_no_host() -> None:
    for name in ("r1", "r2"):
        release = load_model(ROOT / f"releases/{name}.yaml", Release)
        assert release.host == []
        assert release.gates.benchmark == BenchmarkGate(**release.gates.benchmark.model_dump())


def test_the_recorded_arms_are_the_previous_release_s_own_arms_still_as_saved(
    tmp_path: Path,
) -> None:
    """r2's newest published record on the shape: its candidate arms (r2 measured), never its
    previous arms (r1) nor an edited one."""
    inputs = _inputs(tmp_path)
    experiments = tmp_path / "experiments"
    writer = open_record(
        experiments, inputs.previous, build_digest="sha256:aaa", cluster=inputs.cluster,
        previous="r1", today=DAY,
    )  # fmt: skip
    fill(writer, ["benchmark"])
    writer.publish(verdict="passed", stage_order=["benchmark"], versions={})
    context = GateContext(
        cluster=inputs.cluster, release=inputs.release, previous=inputs.previous,
        transports={}, state=tmp_path / "state", experiments=experiments,
    )  # fmt: skip
    found = RecordHistory().previous_arms(context)
    assert found is not None
    assert found.record == writer.path.name
    assert [folder.name for folder in found.folders] == ["1-candidate", "3-candidate"]
    require_recorded_arms(experiments, tmp_path / "releases" / "r3.yaml", inputs.release,
                          inputs.cluster)  # fmt: skip
    edited = writer.path / "benchmark" / "arms" / "3-candidate" / "arm.json"
    edited.write_text(edited.read_text().replace('"label"', '"label" ', 1))
    again = RecordHistory().previous_arms(context)
    assert again is not None
    assert [folder.name for folder in again.folders] == ["1-candidate"]


def test_the_record_names_each_host_layer_and_its_facts() -> None:
    from flows.record.readme import _layer_line  # noqa: PLC0415 - one line of the README

    assert _layer_line(KERNEL | {"facts": {"knob": {"at_least": 1, "expect": None}}}) == (
        "- Host layer `kernel-next` (irreversible): a new kernel, already booted on every node; "
        "facts after it: knob at least 1 (every switch and its readings: `host.json`)"
    )


def test_qualify_refuses_an_irreversible_change_with_no_recorded_arms_before_it_starts(
    tmp_path: Path,
) -> None:
    inputs = _inputs(tmp_path)
    with pytest.raises(MissingPreviousError) as refused:
        require_recorded_arms(tmp_path / "experiments", inputs.release_file, inputs.release,
                              inputs.cluster)  # fmt: skip
    assert refused.value.exit_code == 2
    assert str(refused.value).startswith(
        "r3 changes the hosts irreversibly, so its benchmark compares its arms with r2's arms of "
        "its newest published record on tp2-local, and "
    )
    assert str(refused.value).endswith(f"-c {inputs.cluster.name}`)")


def test_the_plan_of_an_irreversible_change_shows_candidate_arms_and_the_rule(
    tmp_path: Path,
) -> None:
    from flows.pipeline.plan import qualification_plan  # noqa: PLC0415 - the plan's one use

    inputs = _inputs(tmp_path)
    [step] = [s for s in qualification_plan(inputs, tmp_path).steps if s.stage == "benchmark"]
    assert step.detail["arms"] == ["candidate (r3)", "candidate (r3)"]
    assert step.detail["compared with"] == "r2's arms of its newest published record on tp2-local"
    assert step.detail["rule"] == f"{RULE}: 2 % on each side"
