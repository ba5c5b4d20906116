"""verify: a fresh record verifies; any edited number or missing file is found and named."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flows.fileio import sha256_file
from flows.gates.determinism.rules import PREVIOUS_FILE
from flows.record import verify
from flows.record.writer import RecordWriter, open_record
from flows.spec.cluster import Cluster
from flows.spec.release import Release


def test_fresh_record_verifies(published: Callable[..., RecordWriter]) -> None:
    assert verify(published().path) == []


def test_edited_number_in_readme_is_found(published: Callable[..., RecordWriter]) -> None:
    path = published().path
    readme = path / "README.md"
    text = readme.read_text()
    assert "| 38.21 (**-6.4%**" in text
    readme.write_text(text.replace("| 38.21 (", "| 37.21 ("))
    problems = verify(path)
    assert problems[0] == "README.md was edited after it was published (SHA-256)"
    assert "README.md differs" in problems[1]
    assert "+| decode/prose-c1 (step_ms, lower is better) | 40.84 | 37.21" in problems[1]
    assert len(problems) == 2


def test_a_readme_of_another_layout_is_checked_by_its_hash_only(
    published: Callable[..., RecordWriter],
) -> None:
    path = published().path
    record = json.loads((path / "record.json").read_text())
    readme = path / "README.md"
    readme.write_text(readme.read_text().replace("## About this record", "## About"))
    record["render_version"] = 0  # written by an older renderer, in its own layout
    record["readme"]["sha256"] = sha256_file(readme)
    (path / "record.json").write_text(json.dumps(record))
    assert verify(path) == []  # a layout other than today's renderer's is not a problem
    readme.write_text(readme.read_text().replace("| 38.21 (", "| 37.21 ("))
    assert verify(path) == ["README.md was edited after it was published (SHA-256)"]


def test_edited_number_in_a_result_is_found(published: Callable[..., RecordWriter]) -> None:
    path = published().path
    file = path / "cold_boots/result.json"
    file.write_text(file.read_text().replace('"ready_s": 9.0', '"ready_s": 8.0'))
    problems = "\n".join(verify(path))
    assert "cold_boots/result.json was edited" in problems
    assert "record.json's summary differs" in problems
    assert "README.md differs" in problems


def test_edited_verdict_that_the_interval_does_not_allow(
    published: Callable[..., RecordWriter],
) -> None:
    path = published().path
    record = json.loads((path / "record.json").read_text())
    result = json.loads((path / "benchmark/result.json").read_text())
    for summary in (result["summary"], record["stages"]["benchmark"]["summary"]):
        summary["points"][0]["low"] = -1.0
        summary["points"][0]["high"] = 5.0
    (path / "benchmark/result.json").write_text(json.dumps(result))
    (path / "record.json").write_text(json.dumps(record))
    problems = "\n".join(verify(path))
    assert "verdict 'faster', but its interval [-1.0, +5.0]" in problems
    assert "gives 'inconclusive'" in problems
    assert "outcome passed, but points do not pass: decode/prose-c1" in problems


def test_missing_raw_file_is_found(published: Callable[..., RecordWriter]) -> None:
    path = published().path
    (path / "determinism/responses.jsonl").unlink()
    assert verify(path) == ["determinism: determinism/responses.jsonl is missing"]


def test_missing_plot_and_changed_extra_are_found(
    published: Callable[..., RecordWriter],
) -> None:
    path = published().path
    (path / "plots/boots.png").unlink()
    (path / "inventory.json").write_text('{"local0": {"cpus": 64}}\n')
    problems = verify(path)
    assert "plot: plots/boots.png is missing" in problems
    assert "extra file: inventory.json changed since it was saved (SHA-256)" in problems
    assert "inventory.json: differs from its copy in record.json" in problems


def test_junit_counts_are_recomputed(published: Callable[..., RecordWriter]) -> None:
    path = published().path
    junit = path / "release_tests/junit.xml"
    junit.write_text(junit.read_text().replace('time="0.2"/>', 'time="0.2"><failure/></testcase>'))
    problems = "\n".join(verify(path))
    assert "passed is 3 but the JUnit XML says 2" in problems
    assert "failed is 0 but the JUnit XML says 1" in problems


def test_overall_verdict_must_follow_the_stages(
    published: Callable[..., RecordWriter],
) -> None:
    path = published().path
    record = json.loads((path / "record.json").read_text())
    record["verdict"] = "failed"
    (path / "record.json").write_text(json.dumps(record))
    problems = verify(path)
    assert "verdict 'failed', but every gate passed" in problems


def test_determinism_against_previous_is_recounted_from_hashes(
    tmp_path: Path,
    release_r1: Release,
    release_r2: Release,
    cluster: Cluster,
    helpers: Any,
) -> None:
    experiments = tmp_path / "experiments"
    r1 = open_record(
        experiments,
        release_r1,
        build_digest="sha256:r1",
        cluster=cluster,
        previous=None,
        today=helpers.day,
    )
    changed = {**helpers.hashes, "p3": {"tokens": "other", "logprobs": "other"}}
    r1.save_stage(helpers.determinism(r1.stage_dir("determinism"), hashes=changed))
    r1.publish(verdict="passed", stage_order=["determinism"], versions={})
    r2 = open_record(
        experiments,
        release_r2,
        build_digest="sha256:r2",
        cluster=cluster,
        previous="r1",
        today=helpers.day,
    )
    result = helpers.determinism(r2.stage_dir("determinism"))
    r2.save_stage(result.model_copy(update={"started_at": datetime.now(UTC)}))
    r2.publish(verdict="passed", stage_order=["determinism"], versions={})
    # r1's record no longer holds the hashes r2 compared against (its copy says 4/4 identical)
    (problem,) = verify(r2.path)
    assert problem.startswith(f"determinism: the previous record {r1.path.name} has changed")


def test_unpublished_and_missing_records(
    tmp_path: Path, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    assert "no such record" in verify(tmp_path / "nothing")[0]
    writer = open_record(
        tmp_path, release_r2, build_digest="d", cluster=cluster, previous="r1", today=helpers.day
    )
    problems = verify(writer.path)
    assert problems[0].endswith("not published (status in-progress)")
    assert "README.md is missing" in problems


def _r2_alone(
    tmp_path: Path, release_r2: Release, cluster: Cluster, helpers: Any, *, copy: bool
) -> RecordWriter:
    """An r2 record compared with r1, in a folder where r1's record is not."""
    r2 = open_record(tmp_path / "copied", release_r2, build_digest="sha256:r2", cluster=cluster,
                     previous="r1", today=helpers.day)  # fmt: skip
    result = helpers.determinism(r2.stage_dir("determinism"))
    if not copy:  # a record written before records kept the copy
        (r2.stage_dir("determinism") / PREVIOUS_FILE).unlink()
        result = result.model_copy(update={"files": ["responses.jsonl"]})
    r2.save_stage(result)
    r2.publish(verdict="passed", stage_order=["determinism"], versions={})
    return r2


def test_a_record_copied_on_its_own_verifies_with_the_hashes_it_kept(
    tmp_path: Path, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    r2 = _r2_alone(tmp_path, release_r2, cluster, helpers, copy=True)
    assert verify(r2.path) == []


def test_a_record_without_its_previous_or_a_copy_says_the_previous_is_missing(
    tmp_path: Path, release_r2: Release, cluster: Cluster, helpers: Any
) -> None:
    r2 = _r2_alone(tmp_path, release_r2, cluster, helpers, copy=False)
    (problem,) = verify(r2.path)
    assert "the previous release's record (r1) is not beside this record" in problem
