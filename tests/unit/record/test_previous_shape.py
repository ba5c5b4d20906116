"""The previous release is compared per cluster shape, and a missing record stops the run early.

A TP3 candidate compared with TP4 hashes would fail (or pass) on a difference of reduction
order, not of the release; and a candidate whose previous release has no record on its shape
would skip the comparison silently. Both are refused here, from real record folders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.errors import MissingPreviousError
from flows.pipeline.previous import missing_previous, require_previous
from flows.record.reader import latest_record, published_shapes
from flows.record.writer import open_record
from flows.spec.cluster import Cluster
from flows.spec.release import Release

ROOT = Path(__file__).resolve().parents[3]
R2_FILE = ROOT / "releases" / "r2.yaml"


def _publish_r1(
    experiments: Path, release: Release, cluster: Cluster, helpers: Any, *, gates: list[str]
) -> str:
    writer = open_record(
        experiments, release, build_digest="sha256:r1", cluster=cluster, previous=None,
        resume=False, today=helpers.day,
    )  # fmt: skip
    helpers.fill(writer, gates)
    writer.publish(verdict="qualified", stage_order=gates, versions={})
    return writer.path.name


def _on(cluster: Cluster, shape: str) -> Cluster:
    return cluster.model_copy(update={"shape": shape})


def test_the_newest_record_is_chosen_within_the_shape(
    tmp_path: Path, release_r1: Release, cluster: Cluster, helpers: Any
) -> None:
    experiments = tmp_path / "experiments"
    on_tp2 = _publish_r1(experiments, release_r1, cluster, helpers, gates=["determinism"])
    on_tp4 = _publish_r1(
        experiments, release_r1, _on(cluster, "tp4-ring"), helpers, gates=["determinism"]
    )

    newest_tp2 = latest_record(experiments, "r1", shape="tp2-local")
    newest_tp4 = latest_record(experiments, "r1", shape="tp4-ring")

    assert [r.name if r else None for r in (newest_tp2, newest_tp4)] == [on_tp2, on_tp4]
    assert latest_record(experiments, "r1", shape="tp3-triangle") is None
    assert published_shapes(experiments, "r1") == ["tp2-local", "tp4-ring"]


def test_a_candidate_whose_previous_ran_on_another_shape_only_is_refused_with_the_fix(
    tmp_path: Path, release_r1: Release, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    experiments = tmp_path / "experiments"
    _publish_r1(experiments, release_r1, _on(cluster, "tp4-ring"), helpers, gates=["determinism"])
    triangle = _on(cluster, "tp3-triangle")

    problem = missing_previous(experiments, R2_FILE, release_r2, release_r1, triangle)

    assert problem is not None
    assert "no published record of r1 on that shape (it has records on tp4-ring only)" in problem
    assert f"sparkgate qualify {ROOT / 'releases' / 'r1.yaml'} -c local" in problem
    with pytest.raises(MissingPreviousError) as raised:
        require_previous(experiments, R2_FILE, release_r2, release_r1, triangle)
    assert raised.value.exit_code == 2


def test_a_previous_record_without_determinism_hashes_cannot_stand_in(
    tmp_path: Path, release_r1: Release, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    experiments = tmp_path / "experiments"
    name = _publish_r1(experiments, release_r1, cluster, helpers, gates=["release_tests"])

    problem = missing_previous(experiments, R2_FILE, release_r2, release_r1, cluster)

    assert problem is not None
    assert f"newest record on that shape, {name}, holds no determinism hashes" in problem


def test_the_same_shape_or_no_comparison_needs_nothing_more(
    tmp_path: Path, release_r1: Release, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    experiments = tmp_path / "experiments"
    assert missing_previous(experiments, R2_FILE, release_r1, None, cluster) is None
    off = release_r2.model_copy(
        update={"gates": release_r2.gates.model_copy(update={
            "determinism": release_r2.gates.determinism.model_copy(
                update={"against_previous": False})})}
    )  # fmt: skip
    assert missing_previous(experiments, R2_FILE, off, release_r1, cluster) is None
    _publish_r1(experiments, release_r1, cluster, helpers, gates=["determinism"])
    assert missing_previous(experiments, R2_FILE, release_r2, release_r1, cluster) is None
