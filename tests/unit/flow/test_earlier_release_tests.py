"""Which earlier release-tests passes a new run may take: published, same cluster, files intact."""

from __future__ import annotations

from pathlib import Path

from flows.gates.base import GateContext, GateResult
from flows.gates.release_tests.summary import ReleaseTestsSummary
from flows.pipeline.gate_loop import RecordHistory
from flows.record.writer import RecordWriter, open_record
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release, load_release
from tests.support.paths import ROOT
from tests.support.records import DAY
from tests.support.records import tests_result as passed_tests_result

KEY = "a" * 64
LOCAL = load_model(ROOT / "config/local.yaml", Cluster)
R1, R2 = load_release(ROOT / "releases/r1.yaml"), load_release(ROOT / "releases/r2.yaml")


def _keyed(result: GateResult, key: str | None) -> GateResult:
    assert isinstance(result.summary, ReleaseTestsSummary)
    return result.model_copy(update={"summary": result.summary.model_copy(update={"run_key": key})})


def _record(
    experiments: Path, release: Release, cluster: Cluster, *, key: str | None = KEY
) -> RecordWriter:
    writer = open_record(
        experiments, release, build_digest="sha256:aaa", cluster=cluster, previous=None, today=DAY
    )
    writer.save_stage(_keyed(passed_tests_result(writer.stage_dir("release_tests")), key))
    return writer


def _offered(experiments: Path, release: Release, cluster: Cluster) -> list[str]:
    context = GateContext(
        cluster=cluster, release=release, previous=None, transports={},
        state=experiments / "state", experiments=experiments,
    )  # fmt: skip
    return [run.record for run in RecordHistory().passed_release_tests(context)]


def test_a_published_pass_is_offered_with_its_key_and_raw_files(tmp_path: Path) -> None:
    release_r1, release_r2, cluster = R1, R2, LOCAL
    writer = _record(tmp_path, release_r1, cluster)
    writer.publish(verdict="qualified", stage_order=["release_tests"], versions={})
    context = GateContext(
        cluster=cluster, release=release_r2, previous=release_r1, transports={},
        state=tmp_path / "state", experiments=tmp_path,
    )  # fmt: skip
    [run] = RecordHistory().passed_release_tests(context)
    assert run.record == writer.path.name
    assert run.run_key == KEY
    assert run.files == {"junit.xml": writer.path / "release_tests" / "junit.xml"}


def test_unpublished_unkeyed_edited_or_other_cluster_runs_are_not_offered(tmp_path: Path) -> None:
    release_r1, release_r2, cluster = R1, R2, LOCAL
    _record(tmp_path / "open", release_r1, cluster)  # never published: it may still be resumed
    assert _offered(tmp_path / "open", release_r2, cluster) == []

    older = _record(tmp_path / "old", release_r1, cluster, key=None)  # before keys were kept
    older.publish(verdict="qualified", stage_order=["release_tests"], versions={})
    assert _offered(tmp_path / "old", release_r2, cluster) == []

    edited = _record(tmp_path / "edited", release_r1, cluster)
    edited.publish(verdict="qualified", stage_order=["release_tests"], versions={})
    assert _offered(tmp_path / "edited", release_r2, cluster) == [edited.path.name]
    other = cluster.model_copy(update={"name": "another-cluster"})
    assert _offered(tmp_path / "edited", release_r2, other) == []
    junit = edited.path / "release_tests" / "junit.xml"
    junit.write_text(junit.read_text().replace('name="test_a"', 'name="test_x"'))
    assert _offered(tmp_path / "edited", release_r2, cluster) == []
