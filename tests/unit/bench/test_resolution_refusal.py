"""`qualify` refuses a tolerance the cluster's A/A ledger cannot resolve, before anything starts.

The ledger here is a real calibration record (published by the calibration stage's own code from
arms with the given levels) of the local cluster's shape, so `qualify` reads it exactly as it
reads one `sparkgate calibrate` wrote; only the arms' measurements are made up.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
import yaml

from flows.bench.report import ArmReport, Point, Sample, write_arm
from flows.cli import main
from flows.gates.base import GateContext, Outcome
from flows.gates.benchmark.rules import arm_folder
from flows.pipeline.calibrate import STAGE, VERDICT, run_calibration
from flows.record.aa_ledger import CALIBRATION_DIR
from flows.record.writer import open_record
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import load_release
from flows.spec.suite import Suite

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = ROOT / "config/local.yaml"
NOISY = [1.0, 1.09, 0.93, 1.06]  # arms of one release scattering about 6 % between boots
QUIET = [1.0, 1.004, 0.997, 1.002]


def _arm(label: str, level: float) -> ArmReport:
    factors = (0.99, 1.0, 1.01)
    return ArmReport(
        label=label, source="sparkgate", url="http://127.0.0.1:1", suite="tiny",
        started_utc="2026-12-02T00:00:00+00:00",
        points={"step/grid": Point(workload="step_grid", gate=["engine_cpu_ms"],
                                   samples=[Sample(metrics={"engine_cpu_ms": 2.0 * level * f})
                                            for f in factors])},
    )  # fmt: skip


def _project(
    root: Path, levels: list[float], suite: dict[str, object], tolerance: float = 0.1
) -> Path:
    """A project with a calibration record of these levels, a suite, r1 and a release `r3`."""
    suite_file = root / "suites/tiny.yaml"
    suite_file.parent.mkdir(parents=True)
    suite_file.write_text(yaml.safe_dump(suite))
    releases = root / "releases"
    releases.mkdir()
    (releases / "r1.yaml").write_text(yaml.safe_dump({"extends": str(ROOT / "releases/r1.yaml")}))
    release = releases / "r3.yaml"
    release.write_text(
        "extends: " + str(ROOT / "releases/r2.yaml") + "\n"
        "set:\n"
        "  name: r3\n"
        "  gates:\n"
        "    benchmark:\n"
        f"      suite: {suite_file}\n"
        "      max_arms: 7\n"
        f"      tolerance: {tolerance}\n"
    )
    cluster = load_model(CLUSTER, Cluster)
    r1 = load_release(releases / "r1.yaml")
    writer = open_record(
        root / "experiments" / CALIBRATION_DIR, r1, build_digest="sha256:aaa", cluster=cluster,
        previous=None, resume=False, today=date(2026, 12, 2),
    )  # fmt: skip
    out = writer.stage_dir(STAGE)

    def measure(index: int) -> ArmReport:
        report = _arm(f"{index}-candidate", levels[index - 1])
        write_arm(report, arm_folder(out, index, "candidate"))
        return report

    context = GateContext(
        cluster=cluster, release=r1, previous=None, transports={}, state=root / "state",
        experiments=root / "experiments",
    )  # fmt: skip
    result = run_calibration(
        context, Suite.model_validate(suite), len(levels), out, measure=measure
    )
    assert result.outcome == Outcome.PASSED, result.reason
    writer.save_stage(result)
    writer.publish(verdict=VERDICT, stage_order=[STAGE], versions={})
    return release


def _suite(**extra: object) -> dict[str, object]:
    return {"kind": "suite", "name": "tiny", **extra,
            "workloads": [{"kind": "step_grid", "name": "step", "concurrency": [1],
                           "context": [128]}]}  # fmt: skip


@pytest.fixture
def no_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Anything past the refusal (Prefect, the flow, a boot) fails the test."""

    def started(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the qualification started")

    monkeypatch.setattr("flows.settings.prefect_environment", started)
    monkeypatch.setattr("flows.pipeline.previous.require_previous", started)


def test_a_tolerance_finer_than_the_ledger_resolves_is_refused_before_anything_starts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_run: None,
) -> None:
    release = _project(tmp_path, NOISY, _suite())
    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path))

    code = main(["qualify", str(release), "-c", str(CLUSTER), "--no-wait"])

    said = " ".join(capsys.readouterr().err.split())
    assert code == 2, said
    assert f"{release}:" in said  # the release file, its line and key: where the 3 % is written
    assert "gates.benchmark.tolerance: tolerance 10 % on step/grid engine_cpu_ms" in said
    assert "finer than this cluster resolves in max_arms 7" in said
    assert "raise gates.benchmark.max_arms to" in said  # remedy 1: more arms
    assert "judge at a tolerance this cluster can prove" in said  # remedy 2: a wider tolerance
    assert not list((tmp_path / "experiments").glob("*-r3"))


def test_the_suites_tolerance_is_the_one_named_when_it_is_too_fine(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_run: None,
) -> None:
    release = _project(tmp_path, NOISY, _suite(tolerances={"engine_cpu_ms": 0.04}))
    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path))

    code = main(["qualify", str(release), "-c", str(CLUSTER), "--plan"])

    said = " ".join(capsys.readouterr().err.split())
    assert code == 2, said
    assert f"{tmp_path / 'suites/tiny.yaml'}:" in said
    assert "tolerances.engine_cpu_ms: tolerance 4 % on step/grid" in said


def test_a_resolvable_tolerance_is_printed_in_the_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    release = _project(tmp_path, QUIET, _suite(tolerances={"engine_cpu_ms": 0.15}))
    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path))

    code = main(["qualify", str(release), "-c", str(CLUSTER), "--plan"])

    said = " ".join(capsys.readouterr().err.split())
    assert code == 0, said
    assert "this cluster resolves ±" in said
    assert "on step/grid after 3 arms" in said
    assert "tolerance 15 %: within it from 3 arms" in said


def test_without_a_ledger_the_plan_says_the_first_qualification_calibrates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    release = _project(tmp_path, QUIET, _suite())
    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path / "elsewhere"))  # no records there
    (tmp_path / "elsewhere").mkdir()

    code = main(["qualify", str(release), "-c", str(CLUSTER), "--plan"])

    said = " ".join(capsys.readouterr().err.split())
    assert code == 0, said
    assert "no A/A ledger yet for tp2-local and suite tiny: the first qualification calibrates" in (
        said
    )


def test_a_ledger_of_two_gaps_is_said_but_never_refused_on(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The demo's three-arm calibration leaves two gaps: too loose an SD to refuse a run on."""
    release = _project(tmp_path, NOISY[:3], _suite())
    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path))

    code = main(["qualify", str(release), "-c", str(CLUSTER), "--plan"])

    said = " ".join(capsys.readouterr().err.split())
    assert code == 0, said
    assert "NOT within it by 7 arms by this estimate, too loose to refuse on below 3 gaps" in said
    assert "from 2 A/A gaps" in said
