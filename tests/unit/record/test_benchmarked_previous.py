"""The benchmark's previous arms boot the previous release as it was qualified, never a new build.

The recipe's build command builds whatever its checkout holds; by the time r6z is qualified that
is r6z's commit, so building r6y again for its previous arms would compare the candidate with
itself. A command- or Dockerfile-built previous release therefore boots the image ID its record
on the cluster's shape names, and is refused without one; an adopted tag and a source build are
booted as their files say. Records here are real record folders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.errors import MissingPreviousError
from flows.pipeline.inputs import QualificationInputs
from flows.pipeline.plan import qualification_plan
from flows.pipeline.previous import as_qualified, benchmarked_previous
from flows.record.writer import open_record
from flows.spec.build import Build
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release

ROOT = Path(__file__).resolve().parents[3]
IMAGE_ID = "sha256:" + "cd" * 32
COMMAND_BUILD = """\
build:
  kind: command
  command: [bin/spark, --cluster-config, config/cluster.json, build, image, --apply]
  cwd: /home/spark/spark-ds41f
  image_line: '^built (\\\\S+) sha256:'
"""
ADOPTED_BUILD = """\
build:
  kind: image
  image: vllm-ds41f-kkref:19f2c20ed4d6-r6x
"""
RELEASE = """\
kind: release
name: {name}
previous: {previous}
{build}outputs:
  change: unchanged
gates:
  release_tests:
    classification: {classification}
  determinism:
    against_previous: false
  cold_boots:
    enabled: false
{benchmark}"""


def _write(folder: Path, name: str, previous: str | None, build: str) -> Path:
    file = folder / f"{name}.yaml"
    classification = ROOT / "config" / "release-tests.yaml"
    file.write_text(
        RELEASE.format(
            name=name,
            previous=previous or "null",
            build=build,
            classification=classification,
            benchmark="" if previous else "  benchmark:\n    enabled: false\n",
        )
    )
    return file


def _publish(experiments: Path, release: Release, cluster: Cluster, helpers: Any) -> None:
    writer = open_record(
        experiments, release, build_digest=IMAGE_ID, cluster=cluster, previous=None,
        resume=False, today=helpers.day,
    )  # fmt: skip
    writer.save_json(
        "build.json",
        {"origin": "command", "built_on": "dgx1",
         "built": {"tag": "vllm-ds41f-kkref:19f2c20ed4d6-r6y", "image_id": IMAGE_ID}},
    )  # fmt: skip
    helpers.fill(writer, ["release_tests"])
    writer.publish(verdict="qualified", stage_order=["release_tests"], versions={})


def _pair(tmp_path: Path, previous_build: str) -> tuple[Path, Release, Release]:
    _write(tmp_path, "r6y", None, previous_build)
    candidate_file = _write(tmp_path, "r6z", "r6y", COMMAND_BUILD)
    return (
        candidate_file,
        load_model(candidate_file, Release),
        load_model(tmp_path / "r6y.yaml", Release),
    )


def test_a_command_built_previous_boots_the_image_its_record_on_this_shape_names(
    tmp_path: Path, cluster: Cluster, helpers: Any
) -> None:
    candidate_file, candidate, previous = _pair(tmp_path, COMMAND_BUILD)
    experiments = tmp_path / "experiments"
    _publish(experiments, previous, cluster, helpers)

    booted = benchmarked_previous(experiments, candidate_file, candidate, previous, cluster)

    assert booted is not None
    assert booted.name == "r6y"
    assert booted.build == Build(
        kind="image", image="vllm-ds41f-kkref:19f2c20ed4d6-r6y", image_id=IMAGE_ID, on="dgx1"
    )


def test_a_command_built_previous_with_no_record_on_this_shape_is_refused_with_the_fix(
    tmp_path: Path, cluster: Cluster, helpers: Any
) -> None:
    candidate_file, candidate, previous = _pair(tmp_path, COMMAND_BUILD)
    experiments = tmp_path / "experiments"
    _publish(experiments, previous, cluster.model_copy(update={"shape": "tp4-ring"}), helpers)

    with pytest.raises(MissingPreviousError) as raised:
        benchmarked_previous(experiments, candidate_file, candidate, previous, cluster)

    message = str(raised.value)
    assert raised.value.exit_code == 2
    assert "no published record of r6y on tp2-local naming its image" in message
    assert f"sparkgate qualify {tmp_path / 'r6y.yaml'} -c local" in message
    assert "build.kind: image" in message


def test_an_adopted_or_source_previous_boots_as_its_file_says_when_nothing_is_recorded(
    tmp_path: Path, cluster: Cluster, release_r1: Release, release_r2: Release
) -> None:
    candidate_file, candidate, adopted = _pair(tmp_path, ADOPTED_BUILD)
    experiments = tmp_path / "experiments"

    assert benchmarked_previous(experiments, candidate_file, candidate, adopted, cluster) == adopted
    r2_file = ROOT / "releases" / "r2.yaml"
    assert benchmarked_previous(experiments, r2_file, release_r2, release_r1, cluster) == release_r1


def test_a_calibration_measures_the_image_a_release_qualified_with_once_it_has_one(
    tmp_path: Path, cluster: Cluster, release_r1: Release, helpers: Any
) -> None:
    _, _, made = _pair(tmp_path, COMMAND_BUILD)
    experiments = tmp_path / "experiments"
    assert as_qualified(experiments, made, cluster) is None  # not qualified yet: built as asked

    _publish(experiments, made, cluster, helpers)

    pinned = as_qualified(experiments, made, cluster)
    assert pinned is not None
    assert (pinned.build.kind, pinned.build.image_id) == ("image", IMAGE_ID)
    assert as_qualified(experiments, release_r1, cluster) is None  # a source build rebuilds


def test_the_plan_names_each_arm_image_and_shows_the_refusal_it_would_meet(
    tmp_path: Path, cluster: Cluster, helpers: Any
) -> None:
    candidate_file, candidate, previous = _pair(tmp_path, COMMAND_BUILD)
    experiments = tmp_path / "experiments"

    def images() -> dict[str, str]:
        given = QualificationInputs(
            release_file=candidate_file, cluster_file=candidate_file, release=candidate,
            previous=previous, cluster=cluster, suite=None,
        )  # fmt: skip
        plan = qualification_plan(given, experiments)
        (step,) = [s for s in plan.steps if s.stage == "benchmark"]
        return dict(step.detail["images"])

    before = images()
    assert before["candidate"] == "r6z: <named by the build stage>"
    assert "previous" not in before
    assert "qualify r6y on a tp2-local cluster first" in before["refused"]

    _publish(experiments, previous, cluster, helpers)
    assert images()["previous"] == (f"r6y: vllm-ds41f-kkref:19f2c20ed4d6-r6y {IMAGE_ID} (pinned)")
