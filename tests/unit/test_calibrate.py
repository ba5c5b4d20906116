"""A/A calibration gaps and the ledger derived from records of the same cluster shape and suite."""

from __future__ import annotations

import math
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pytest

from flows.bench.ledger import Ledger, helmert_gaps, write_ledger
from flows.bench.report import ArmReport, Point, Sample, write_arm
from flows.bench.stats import aa_gap
from flows.cli import main
from flows.errors import BootError
from flows.gates.base import GateContext, GateResult, Outcome
from flows.gates.benchmark.rules import arm_folder
from flows.gates.benchmark.summary import CalibrationSummary
from flows.pipeline.calibrate import STAGE, VERDICT, narrowed, run_calibration
from flows.record import read_record, verify
from flows.record.aa_ledger import CALIBRATION_DIR, GAPS_FILE, ledger_for, ledger_from_records
from flows.record.writer import open_record
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import BenchmarkGate, Release, load_release
from flows.spec.suite import Suite

ROOT = Path(__file__).resolve().parents[2]
DAY = date(2026, 12, 2)
SHAPE = "tp2-local"


def _arm(label: str, level: float, suite: str = "tiny") -> ArmReport:
    factors = (0.99, 1.0, 1.01)
    return ArmReport(
        label=label, source="sparkgate", url="http://127.0.0.1:1", suite=suite,
        started_utc="2026-12-02T00:00:00+00:00",
        points={
            "streams/c2": Point(workload="closed_loop", gate=["tps"],
                                samples=[Sample(metrics={"tps": 100 * level * f})
                                         for f in factors]),
            "single": Point(workload="single_stream", gate=["ttft_ms"],
                            samples=[Sample(metrics={"ttft_ms": 20 / level * f})
                                     for f in factors]),
        },
    )  # fmt: skip


def _suite(name: str = "tiny") -> Suite:
    return Suite.model_validate(
        {"name": name, "workloads": [{"kind": "single_stream", "name": "single"}]}
    )


@pytest.fixture
def release() -> Release:
    return load_release(ROOT / "releases/r1.yaml")


@pytest.fixture
def cluster() -> Cluster:
    found = load_model(ROOT / "config/local.yaml", Cluster)
    assert found.shape == SHAPE
    return found


def _context(cluster: Cluster, release: Release, tmp: Path) -> GateContext:
    return GateContext(
        cluster=cluster, release=release, previous=None, transports={}, state=tmp / "state",
        experiments=tmp / "experiments",
    )  # fmt: skip


def _calibration(
    tmp: Path, cluster: Cluster, release: Release, levels: list[float], suite: str = "tiny"
) -> Path:
    """A published calibration record whose arms have the given levels."""
    writer = open_record(
        tmp / "experiments" / CALIBRATION_DIR, release, build_digest="sha256:aaa",
        cluster=cluster, previous=None, resume=False, today=DAY,
    )  # fmt: skip
    out = writer.stage_dir(STAGE)

    def measure(index: int) -> ArmReport:
        report = _arm(f"{index}-candidate", levels[index - 1], suite)
        write_arm(report, arm_folder(out, index, "candidate"))
        return report

    context = _context(cluster, release, tmp)
    result = run_calibration(context, _suite(suite), len(levels), out, measure=measure)
    assert result.outcome == Outcome.PASSED, result.reason
    writer.save_stage(result)
    return writer.publish(verdict=VERDICT, stage_order=[STAGE], versions={})


def _qualification(tmp: Path, cluster: Cluster, release: Release, levels: list[float]) -> Path:
    """A published qualification record whose benchmark kept the C1/C2 gap as the gate does."""
    writer = open_record(
        tmp / "experiments", release, build_digest="sha256:bbb", cluster=cluster,
        previous=None, resume=False, today=DAY,
    )  # fmt: skip
    out = writer.stage_dir("benchmark")
    first, second = _arm("1-candidate", levels[0]), _arm("3-candidate", levels[1])
    write_arm(first, arm_folder(out, 1, "candidate"))
    write_arm(_arm("2-previous", 1.0), arm_folder(out, 2, "previous"))
    write_arm(second, arm_folder(out, 3, "candidate"))
    write_ledger(Ledger().with_session(first, second), out / GAPS_FILE)
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.json"))
    writer.save_stage(
        GateResult(
            gate="benchmark", outcome=Outcome.PASSED, reason="level", seconds=1.0,
            started_at=writer.record.created_at, files=files,
        )
    )  # fmt: skip
    return writer.publish(verdict="qualified", stage_order=["benchmark"], versions={})


def test_n_arms_give_n_minus_1_gaps_the_first_being_log_c1_over_c2() -> None:
    arms = [_arm("1", 1.00), _arm("2", 1.02), _arm("3", 0.97), _arm("4", 1.01)]
    ledger = helmert_gaps(arms, "cal")
    assert len(ledger.sessions) == 3
    gaps = ledger.for_metric("streams/c2", "tps")
    assert len(gaps) == 3
    first = aa_gap(arms[0].points["streams/c2"].values("tps"),
                   arms[1].points["streams/c2"].values("tps"))  # fmt: skip
    assert gaps[0] == pytest.approx(first)
    # the third compares arm 4 with the mean of arms 1-3 (log scale), scaled to one pair's variance
    logs = np.log([1.00, 1.02, 0.97, 1.01])
    assert gaps[2] == pytest.approx(math.sqrt(2 * 3 / 4) * (logs[:3].mean() - logs[3]))


def test_gaps_are_independent_and_each_worth_one_pair_of_boot_noise() -> None:
    rng = np.random.default_rng(7)
    sd, sessions = 0.02, 3000
    collected: list[list[float]] = []
    for _ in range(sessions):
        levels = np.exp(rng.normal(0.0, sd, size=4))
        ledger = helmert_gaps([_arm(str(i), float(v)) for i, v in enumerate(levels)], "s")
        collected.append(ledger.for_metric("streams/c2", "tps"))
    gaps = np.asarray(collected)
    for k in range(3):  # each contrast has the variance of log(C1/C2): 2 sd^2
        assert float(np.mean(gaps[:, k] ** 2)) == pytest.approx(2 * sd**2, rel=0.1)
    correlation = np.corrcoef(gaps.T)
    assert np.all(np.abs(correlation[np.triu_indices(3, 1)]) < 0.06)


def test_ledger_pools_calibrations_and_benchmarks_of_the_same_shape_and_suite(
    tmp_path: Path, cluster: Cluster, release: Release
) -> None:
    calibration = _calibration(tmp_path, cluster, release, [1.0, 1.01, 0.99])
    qualification = _qualification(tmp_path, cluster, release, [1.0, 1.02])
    _calibration(tmp_path, cluster, release, [1.0, 1.05], suite="other")
    ring = cluster.model_copy(update={"shape": "tp4-ring"})
    _calibration(tmp_path, ring, release, [1.0, 1.05])
    open_record(
        tmp_path / "experiments" / CALIBRATION_DIR,
        release,
        build_digest="sha256:ccc",
        cluster=cluster,
        previous=None,
        resume=False,
        today=DAY,
    )  # fmt: skip - unpublished: not evidence yet

    ledger = ledger_from_records(tmp_path / "experiments", SHAPE, "tiny")

    assert len(ledger.sessions) == 3
    assert [s.split(":")[0] for s in ledger.sessions] == [
        calibration.name, calibration.name, qualification.name,
    ]  # fmt: skip
    tps = ledger.for_metric("streams/c2", "tps")
    assert tps[0] == pytest.approx(math.log(1.0 / 1.01))
    assert tps[2] == pytest.approx(math.log(1.0 / 1.02))
    assert len(ledger.for_metric("single", "ttft_ms")) == 3
    assert len(ledger_from_records(tmp_path / "experiments", "tp4-ring", "tiny").sessions) == 1
    assert len(ledger_from_records(tmp_path / "experiments", SHAPE, "other").sessions) == 1
    assert ledger_from_records(tmp_path / "experiments", "tp3-triangle", "tiny").sessions == []


def test_a_gap_file_edited_after_saving_is_left_out(
    tmp_path: Path, cluster: Cluster, release: Release
) -> None:
    record = _calibration(tmp_path, cluster, release, [1.0, 1.01, 0.99])
    assert len(ledger_from_records(tmp_path / "experiments", SHAPE, "tiny").sessions) == 2
    gaps = record / STAGE / GAPS_FILE
    gaps.chmod(0o644)
    gaps.write_text(gaps.read_text().replace("-", "", 1))
    assert ledger_from_records(tmp_path / "experiments", SHAPE, "tiny").sessions == []


def test_calibration_keeps_gaps_and_boot_noise(
    tmp_path: Path, cluster: Cluster, release: Release
) -> None:
    record = _calibration(tmp_path, cluster, release, [1.0, 1.02, 0.98])
    result = GateResult.model_validate_json((record / STAGE / "result.json").read_text())
    summary = result.summary_as(CalibrationSummary)
    assert summary is not None
    assert summary.gaps == 2
    assert summary.shape == SHAPE
    assert set(summary.boot_noise_pct) == {"streams/c2:tps", "single:ttft_ms"}
    assert summary.boot_noise_pct["streams/c2:tps"] > 0.5
    assert "2 A/A gaps from 3 arms of r1" in result.reason
    assert "aa-gaps.json" in result.files
    assert "arms/1-candidate/arm.json" in result.files
    assert verify(record) == []


def test_a_boot_failure_fails_the_calibration_with_its_evidence(
    tmp_path: Path, cluster: Cluster, release: Release
) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()

    def measure(index: int) -> ArmReport:
        if index == 2:
            raise BootError("rank 1 on node1 exited 3", evidence=evidence)
        return _arm(str(index), 1.0)

    out = tmp_path / "out"
    result = run_calibration(_context(cluster, release, tmp_path), _suite(), 3, out, measure)
    assert result.outcome == Outcome.FAILED
    assert result.reason.startswith("arm 2 failed to boot: rank 1 on node1 exited 3")
    assert result.evidence == [str(evidence)]
    assert not (out / GAPS_FILE).exists()


def test_gated_only_keeps_the_shipped_suites_gating_workloads_under_its_own_name() -> None:
    """`calibrate --gated-only` on release-local measures the engine grid, prefill and prefix
    (what gates there) and none of the reported decode workloads; the name is kept, so the gaps
    pool with full calibrations and qualifications of the same suite."""
    suite = load_model(ROOT / "config/suites/release-local.yaml", Suite)
    kept, said = narrowed(suite)
    assert kept.name == suite.name
    assert [w.name for w in kept.workloads] == ["prefill", "step", "prefix"]
    assert said == "gated workloads only, without single, streams, poisson"
    assert narrowed(kept)[1] == "gated workloads only"


def test_calibrate_refuses_fewer_than_two_arms(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", str(ROOT / "releases/r1.yaml"), "--arms", "1"]) == 2
    assert "--arms: 1 arms give no A/A gap (expected 2 or more)" in capsys.readouterr().err


def test_the_gate_gets_the_ledger_of_its_cluster_shape_and_suite_name(
    tmp_path: Path, cluster: Cluster, release: Release
) -> None:
    _calibration(tmp_path, cluster, release, [1.0, 1.01, 0.99])
    suite = tmp_path / "any-file-name.yaml"
    suite.write_text("kind: suite\nname: tiny\nworkloads: [{kind: single_stream, name: single}]\n")
    settings = BenchmarkGate(suite=str(suite))
    ledger = ledger_for(_context(cluster, release, tmp_path), settings)
    assert len(ledger.sessions) == 2
    ring = _context(cluster.model_copy(update={"shape": "tp4-ring"}), release, tmp_path)
    assert ledger_for(ring, settings).sessions == []


def test_the_ledger_as_it_was_before_a_moment(
    tmp_path: Path, cluster: Cluster, release: Release
) -> None:
    first = read_record(_calibration(tmp_path, cluster, release, [1.0, 1.01]))
    _calibration(tmp_path, cluster, release, [1.0, 1.02, 0.99])
    experiments = tmp_path / "experiments"
    assert len(ledger_from_records(experiments, SHAPE, "tiny").sessions) == 3
    assert first.published_at is not None
    moment = first.published_at + timedelta(microseconds=1)
    assert (
        len(ledger_from_records(experiments, SHAPE, "tiny", published_before=moment).sessions) == 1
    )
    before_all = first.published_at
    assert (
        ledger_from_records(experiments, SHAPE, "tiny", published_before=before_all).sessions == []
    )
