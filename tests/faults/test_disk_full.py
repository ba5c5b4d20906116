"""Faults: the disk fills during a record write; record files' mode; directory fsync; a run on
another cluster resuming a record (issue 15, Low: "Record files are 0600 and no directory is
fsynced", "A run on another cluster resumes the first cluster's in-progress record", and
deliverable 8, "Disk full").

The disk-full tests mount a 64 KiB tmpfs (root only) so ENOSPC comes from a real filesystem.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from flows import fileio
from flows.errors import DiskFullError
from flows.record.index import write_index
from flows.record.reader import read_record
from flows.record.writer import open_record
from flows.spec.cluster import Cluster
from flows.spec.release import Release
from tests.support.disk import fill
from tests.support.records import (  # noqa: F401 - fixtures used by name
    DAY,
    bench_result,
    cluster,
    release_r2,
)
from tests.support.records import (
    tests_result as release_tests_result,
)


def test_a_record_write_on_a_full_disk_keeps_the_previous_version(
    small_disk: Path,
    release_r2: Release,  # noqa: F811
    cluster: Cluster,  # noqa: F811
) -> None:
    experiments = small_disk / "experiments"
    writer = open_record(
        experiments, release_r2, build_digest="sha256:d", cluster=cluster, previous="r1", today=DAY
    )
    writer.save_stage(release_tests_result(writer.stage_dir("release_tests")))
    record_file = writer.path / "record.json"
    before = record_file.read_bytes()
    benchmark = bench_result(writer.stage_dir("benchmark"))
    fill(small_disk)
    with pytest.raises(DiskFullError, match=r"No space left on device.*previous version is intact"):
        fileio.write_json(record_file, {"big": "x" * 100_000})
    assert record_file.read_bytes() == before
    with pytest.raises(DiskFullError, match="No space left on device"):
        writer.save_stage(benchmark)
    assert record_file.read_bytes() == before
    assert read_record(writer.path).stages.keys() == {"release_tests"}
    leftovers = [p.name for p in writer.path.rglob(".*") if p.name.startswith(".record.json.")]
    assert leftovers == []


def test_the_index_on_a_full_disk_keeps_the_previous_index(small_disk: Path) -> None:
    experiments = small_disk / "experiments"
    index = write_index(experiments)
    before = index.read_bytes()
    fill(small_disk)
    (experiments / "README.md").write_bytes(before)  # same content: fits in its own blocks
    with pytest.raises(DiskFullError, match="No space left on device"):
        fileio.write_text(index, "# Experiments\n" + "row\n" * 20_000)
    assert index.read_bytes() == before


def test_record_files_are_world_readable(
    tmp_path: Path,
    release_r2: Release,  # noqa: F811
    cluster: Cluster,  # noqa: F811
) -> None:
    writer = open_record(
        tmp_path, release_r2, build_digest="sha256:d", cluster=cluster, previous="r1", today=DAY
    )
    writer.save_stage(release_tests_result(writer.stage_dir("release_tests")))
    for name in ("record.json", "release_tests/result.json"):
        mode = stat.S_IMODE((writer.path / name).stat().st_mode)
        assert mode == 0o644, f"{name}: {mode:o}"


def test_the_folder_is_fsynced_after_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(handle: int) -> None:
        synced.append(str(Path(f"/proc/self/fd/{handle}").readlink()))
        real_fsync(handle)

    monkeypatch.setattr(os, "fsync", spy)
    fileio.write_text(tmp_path / "a" / "b.txt", "x")
    assert synced[-1] == str(tmp_path / "a")
    assert str(tmp_path) in synced  # the new folder's entry in its parent


def test_a_run_on_another_cluster_does_not_resume_the_first_clusters_record(
    tmp_path: Path,
    release_r2: Release,  # noqa: F811
    cluster: Cluster,  # noqa: F811
) -> None:
    first = open_record(
        tmp_path, release_r2, build_digest="sha256:d", cluster=cluster, previous="r1", today=DAY
    )
    first.save_stage(release_tests_result(first.stage_dir("release_tests")))
    other = cluster.model_copy(update={"name": "other-cluster"})
    second = open_record(
        tmp_path, release_r2, build_digest="sha256:d", cluster=other, previous="r1", today=DAY
    )
    assert second.path != first.path
    assert json.loads((second.path / "record.json").read_text())["cluster_name"] == "other-cluster"
    assert second.record.stages == {}
    again = open_record(
        tmp_path, release_r2, build_digest="sha256:d", cluster=cluster, previous="r1", today=DAY
    )
    assert again.path == first.path
