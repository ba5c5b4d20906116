"""Records written before summaries were typed (schema version 1) still read and verify."""

from __future__ import annotations

import shutil
from pathlib import Path

from flows.gates.benchmark.summary import BenchmarkSummary
from flows.gates.cold_boots.summary import ColdBootsSummary
from flows.gates.determinism.kept import record_hashes
from flows.gates.determinism.summary import DeterminismSummary
from flows.gates.release_tests.summary import ReleaseTestsSummary
from flows.record import SCHEMA_VERSION, read_record, verify
from flows.record.legacy import LEGACY_VERSION, upgrade_record, upgrade_result
from flows.record.writer import RecordWriter

SCHEMA_1 = Path(__file__).resolve().parents[2] / "data" / "records" / "schema-1"
R1, R2 = SCHEMA_1 / "2026-12-03-r1", SCHEMA_1 / "2026-12-03-r2"


def test_the_fixture_records_are_of_the_old_schema() -> None:
    assert LEGACY_VERSION < SCHEMA_VERSION
    assert read_record(R1).schema_version == LEGACY_VERSION
    assert read_record(R2).schema_version == LEGACY_VERSION


def test_old_records_verify_against_their_raw_files() -> None:
    assert verify(R1) == []
    assert verify(R2) == []


def test_old_summaries_read_as_typed_models() -> None:
    r1, r2 = read_record(R1), read_record(R2)
    tests = r1.summary_of(ReleaseTestsSummary)
    assert tests is not None
    assert tests.passed > 0
    assert tests.failed == 0
    assert r2.stages["release_tests"].summary is None  # disabled: v1 stored {}
    determinism = r2.summary_of(DeterminismSummary)
    assert determinism is not None
    assert determinism.against_previous is not None
    assert determinism.against_previous.mode == "unchanged"
    boots = r2.summary_of(ColdBootsSummary)
    assert boots is not None
    assert [b.mode for b in boots.boots] == ["warm"]
    bench = r2.summary_of(BenchmarkSummary)
    assert bench is not None
    assert bench.arms == ["candidate", "previous", "candidate"]
    assert record_hashes(r1)  # the next release compares against an old record's hashes


def test_an_old_in_progress_stage_loads_back_typed(tmp_path: Path) -> None:
    folder = tmp_path / "2026-12-03-r2"
    shutil.copytree(R2, folder)
    record = folder / "record.json"
    record.write_text(record.read_text().replace('"published"', '"in-progress"', 1))
    loaded = RecordWriter(folder).load_stage("determinism")
    assert loaded is not None
    assert loaded.summary_as(DeterminismSummary) is not None


def test_the_upgrade_leaves_the_current_layout_alone() -> None:
    summary = {"gate": "benchmark", "arms": []}
    assert upgrade_result({"gate": "benchmark", "summary": summary})["summary"] == summary
    assert upgrade_result({"gate": "benchmark", "summary": None})["summary"] is None
    data = {"stages": {"benchmark": {"summary": {}}, "determinism": {"summary": {"prompts": 1}}}}
    upgraded = upgrade_record(data)["stages"]
    assert upgraded["benchmark"]["summary"] is None
    assert upgraded["determinism"]["summary"] == {"gate": "determinism", "prompts": 1}
