"""Opening, resuming, saving and publishing records: folders, atomic files, publish-once."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flows.errors import RecordError
from flows.gates.base import GateResult, Outcome
from flows.gates.determinism.kept import record_hashes
from flows.gates.determinism.summary import DeterminismSummary
from flows.record import latest_record, read_record, verify
from flows.record.writer import RecordWriter, open_record
from flows.spec.cluster import Cluster
from flows.spec.release import Release


def _open(root: Path, release: Release, cluster: Cluster, helpers: Any, **kw: Any) -> RecordWriter:
    kw.setdefault("build_digest", "sha256:aaa")
    return open_record(
        root, release, cluster=cluster, previous=release.previous, today=helpers.day, **kw
    )


def test_open_creates_dated_folder_in_progress(
    tmp_path: Path, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    writer = _open(tmp_path, release_r2, cluster, helpers)
    assert writer.path == tmp_path / "2026-12-02-r2"
    record = read_record(writer.path)
    assert record.status == "in-progress"
    assert record.release["name"] == "r2"
    assert record.cluster["name"] == cluster.name
    assert record.build_digest == "sha256:aaa"
    assert record.previous == "r1"


def test_save_stage_writes_result_and_hashes(
    tmp_path: Path, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    writer = _open(tmp_path, release_r2, cluster, helpers)
    helpers.fill(writer, ["release_tests"])
    result = json.loads((writer.path / "release_tests/result.json").read_text())
    assert result["summary"]["passed"] == 3
    entry = read_record(writer.path).stages["release_tests"]
    assert entry.outcome == "passed"
    assert [f.path for f in entry.files] == ["release_tests/junit.xml"]
    assert len(entry.files[0].sha256) == 64
    assert not list(writer.path.rglob(".*.json.*")), "no temporary files left behind"


def test_save_stage_refuses_a_listed_file_that_does_not_exist(
    tmp_path: Path, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    writer = _open(tmp_path, release_r2, cluster, helpers)
    result = helpers.factories["benchmark"](writer.stage_dir("benchmark"))
    broken = result.model_copy(update={"files": ["nowhere.json"]})
    with pytest.raises(RecordError, match="does not exist"):
        writer.save_stage(broken)


def test_resume_reopens_unpublished_record_of_same_release_and_digest(
    tmp_path: Path, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    first = _open(tmp_path, release_r2, cluster, helpers)
    helpers.fill(first, ["release_tests", "determinism"])
    again = _open(tmp_path, release_r2, cluster, helpers)
    assert again.path == first.path
    loaded = again.load_stage("determinism")
    assert isinstance(loaded, GateResult)
    summary = loaded.summary_as(DeterminismSummary)
    assert summary is not None
    assert summary.hash_table() == helpers.hashes
    assert loaded == first.load_stage("determinism")
    assert again.load_stage("benchmark") is None


def test_other_digest_or_fresh_opens_a_new_folder(
    tmp_path: Path, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    first = _open(tmp_path, release_r2, cluster, helpers)
    other = _open(tmp_path, release_r2, cluster, helpers, build_digest="sha256:bbb")
    fresh = _open(tmp_path, release_r2, cluster, helpers, resume=False)
    assert len({first.path, other.path, fresh.path}) == 3
    assert other.path.name == "2026-12-02-r2-2"
    assert fresh.path.name == "2026-12-02-r2-3"


def test_load_stage_refuses_an_edited_result(
    tmp_path: Path, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    writer = _open(tmp_path, release_r2, cluster, helpers)
    helpers.fill(writer, ["release_tests"])
    file = writer.path / "release_tests/result.json"
    file.write_text(file.read_text().replace('"passed": 3', '"passed": 4'))
    with pytest.raises(RecordError, match="changed since it was saved"):
        writer.load_stage("release_tests")


def test_published_record_is_never_rewritten_and_not_reopened(
    published: Callable[..., RecordWriter], helpers: Any
) -> None:
    writer = published()
    before = {p: p.read_bytes() for p in writer.path.rglob("*") if p.is_file()}
    with pytest.raises(RecordError, match="never rewritten"):
        writer.save_stage(helpers.factories["benchmark"](writer.path / "benchmark"))
    with pytest.raises(RecordError, match="never rewritten"):
        writer.save_json("build.json", {})
    with pytest.raises(RecordError, match="never rewritten"):
        writer.publish(verdict="passed", stage_order=helpers.order, versions={})
    with pytest.raises(RecordError, match="never rewritten"):
        RecordWriter(writer.path).stage_dir("benchmark")
    after = {p: p.read_bytes() for p in writer.path.rglob("*") if p.is_file()}
    assert after == before
    again = published()  # same release and digest: a new folder, never the published one
    assert again.path.name == "2026-12-02-r2-2"
    assert published().path.name == "2026-12-02-r2-3"


def test_publish_writes_readme_plots_and_final_record(
    published: Callable[..., RecordWriter],
) -> None:
    writer = published()
    record = read_record(writer.path)
    assert record.status == "published"
    assert record.verdict == "passed"
    assert record.versions == {"sparkgate": "0.1"}
    assert record.host_inventory == {"local0": {"cpus": 2}, "local1": {"cpus": 2}}
    assert {p.path for p in record.plots} == {"plots/benchmark.png", "plots/boots.png"}
    for plot in record.plots:
        assert (writer.path / plot.path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (writer.path / "README.md").is_file()
    assert record.wall_s is not None
    assert record.wall_s >= 0


def test_save_json_rejects_reserved_names(
    tmp_path: Path, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    writer = _open(tmp_path, release_r2, cluster, helpers)
    for name in ("record.json", "README.md", "../x.json", "build.txt"):
        with pytest.raises(RecordError):
            writer.save_json(name, {})
    writer.save_json("build.json", {"local0": "sha256:aaa"})
    assert read_record(writer.path).documents["build.json"] == {"local0": "sha256:aaa"}


def test_latest_record_and_hashes(
    published: Callable[..., RecordWriter],
    tmp_path: Path,
    release_r2: Release,
    cluster: Cluster,
    helpers: Any,
) -> None:
    experiments = tmp_path / "experiments"
    assert latest_record(experiments, "r2") is None
    first = published()
    second = published(digest="sha256:bbb")
    unpublished = _open(experiments, release_r2, cluster, helpers, build_digest="sha256:ccc")
    latest = latest_record(experiments, "r2")
    assert latest is not None
    assert latest.name == second.path.name != first.path.name
    newest = latest_record(experiments, "r2", published_only=False)
    assert newest is not None
    assert newest.name == unpublished.path.name
    assert record_hashes(latest) == helpers.hashes
    assert latest_record(experiments, "r1") is None


def test_evidence_outside_the_record_is_copied_in_and_verified(
    tmp_path: Path, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    evidence = tmp_path / "state" / "evidence" / "local" / "boot-1"
    (evidence / "local0").mkdir(parents=True)
    (evidence / "local0" / "rank0.log").write_text('{"event": "fatal"}\n')
    writer = _open(tmp_path / "experiments", release_r2, cluster, helpers)
    result = helpers.factories["cold_boots"](writer.stage_dir("cold_boots"))
    failed = result.model_copy(update={"outcome": Outcome.FAILED, "evidence": [str(evidence)]})
    writer.save_stage(failed)
    writer.save_stage(failed)  # saved again on resume: one copy, not two
    entry = read_record(writer.path).stages["cold_boots"]
    assert entry.evidence == ["evidence/cold_boots/boot-1"]
    assert [f.path for f in entry.evidence_files] == ["evidence/cold_boots/boot-1/local0/rank0.log"]
    writer.publish(verdict="failed at cold_boots", stage_order=["cold_boots"], versions={})
    readme = (writer.path / "README.md").read_text()
    assert "- `evidence/cold_boots/boot-1`" in readme
    assert verify(writer.path) == []
    (writer.path / "evidence/cold_boots/boot-1/local0/rank0.log").unlink()
    assert verify(writer.path) == [
        "cold_boots evidence: evidence/cold_boots/boot-1/local0/rank0.log is missing"
    ]


def test_record_hashes_prefer_the_raw_hashes_file_while_it_is_unchanged(
    tmp_path: Path, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    writer = _open(tmp_path, release_r2, cluster, helpers)
    out = writer.stage_dir("determinism")
    result = helpers.determinism(out)
    raw = {"p0": {"tokens": "t", "logprobs": "l", "token_ids": [1, 2]}}
    (out / "hashes.json").write_text(json.dumps(raw))
    writer.save_stage(result.model_copy(update={"files": [*result.files, "hashes.json"]}))
    assert record_hashes(read_record(writer.path)) == raw
    (out / "hashes.json").write_text(json.dumps({"p0": {}}))
    assert record_hashes(read_record(writer.path)) == helpers.hashes  # edited: the summary's
