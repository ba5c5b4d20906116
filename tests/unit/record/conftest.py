"""Synthetic gate results of all four gates, with raw files, for the record tests.

Each factory writes the raw files a real gate would (JUnit XML, determinism and benchmark
receipts) into the stage folder it is given, and returns a GateResult with a summary built from
the gates' typed models (tests/support/summaries.py), so the record code is exercised exactly
as the flow will use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from flows.gates.base import GateResult, Outcome
from flows.gates.determinism.rules import PREVIOUS_FILE, previous_copy
from flows.gates.determinism.summary import PromptHashes
from flows.record.writer import RecordWriter, open_record
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release, load_release
from tests.support import summaries

ROOT = Path(__file__).resolve().parents[3]
STARTED = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)
DAY = date(2026, 12, 2)
HASHES = {prompt: digest.model_dump() for prompt, digest in summaries.HASHES.items()}

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.test_kernels" name="test_a" time="0.1"/>
<testcase classname="tests.test_kernels" name="test_b" time="0.1"/>
<testcase classname="tests.test_api" name="test_c" time="0.2"/>
<testcase classname="tests.test_api" name="test_d" time="0.0"><skipped message="no gpu"/></testcase>
</testsuite></testsuites>
"""


@pytest.fixture
def release_r1() -> Release:
    return load_release(ROOT / "releases/r1.yaml")


@pytest.fixture
def release_r2() -> Release:
    return load_release(ROOT / "releases/r2.yaml")


@pytest.fixture
def cluster() -> Cluster:
    return load_model(ROOT / "config/local.yaml", Cluster)


def tests_result(out: Path) -> GateResult:
    (out / "junit.xml").write_text(JUNIT)
    return GateResult(
        gate="release_tests",
        outcome=Outcome.PASSED,
        reason="3 passed, 1 skipped",
        started_at=STARTED,
        seconds=5.5,
        summary=summaries.release_tests(),
        files=["junit.xml"],
    )


def determinism_result(out: Path, *, hashes: dict[str, Any] | None = None) -> GateResult:
    """Passed, identical to r1, keeping the copy of r1's hashes it compared against."""
    (out / "responses.jsonl").write_text(json.dumps({"prompt": "p0", "tokens": [1, 2]}) + "\n")
    (out / PREVIOUS_FILE).write_text(json.dumps(previous_copy("r1", None, HASHES)) + "\n")
    typed = None if hashes is None else {p: PromptHashes(**d) for p, d in hashes.items()}
    return GateResult(
        gate="determinism",
        outcome=Outcome.PASSED,
        reason="every scenario identical; identical to r1",
        started_at=STARTED,
        seconds=30.0,
        summary=summaries.determinism(typed),
        files=["responses.jsonl", PREVIOUS_FILE],
    )


def boots_result(out: Path) -> GateResult:
    (out / "boots.json").write_text("[]\n")
    return GateResult(
        gate="cold_boots",
        outcome=Outcome.PASSED,
        reason="4 boots ready, nothing compiled after preparation",
        started_at=STARTED,
        seconds=60.0,
        summary=summaries.cold_boots(),
        files=["boots.json"],
    )


def bench_result(out: Path) -> GateResult:
    (out / "compare.json").write_text("{}\n")
    return GateResult(
        gate="benchmark",
        outcome=Outcome.PASSED,
        reason="no point slower than the tolerance",
        started_at=STARTED,
        seconds=120.0,
        # Drawn on an A/A ledger of other records, so verify cannot recompute the points from
        # this record's arms (test_recompute.py covers a session that it can recompute).
        summary=summaries.benchmark(),
        files=["compare.json"],
    )


FACTORIES: dict[str, Callable[[Path], GateResult]] = {
    "release_tests": tests_result,
    "determinism": determinism_result,
    "cold_boots": boots_result,
    "benchmark": bench_result,
}
ORDER = list(FACTORIES)


def fill(writer: RecordWriter, stages: list[str] | None = None) -> None:
    """Save every (or the named) synthetic stage into the record."""
    for stage in stages or ORDER:
        writer.save_stage(FACTORIES[stage](writer.stage_dir(stage)))


@pytest.fixture
def published(tmp_path: Path, release_r2: Release, cluster: Cluster) -> Callable[..., RecordWriter]:
    """A factory of published r2 records with all four gates passed."""

    def make(digest: str = "sha256:aaa", previous: str | None = "r1") -> RecordWriter:
        writer = open_record(
            tmp_path / "experiments",
            release_r2,
            build_digest=digest,
            cluster=cluster,
            previous=previous,
            today=DAY,
        )
        fill(writer)
        writer.save_json("inventory.json", {"local0": {"cpus": 2}, "local1": {"cpus": 2}})
        writer.publish(verdict="passed", stage_order=ORDER, versions={"sparkgate": "0.1"})
        return writer

    return make


@pytest.fixture
def helpers() -> Any:
    """The factories above, for tests that build their own records."""

    class Helpers:
        factories = FACTORIES
        order = ORDER
        day = DAY
        hashes = HASHES
        fill = staticmethod(fill)
        determinism = staticmethod(determinism_result)

    return Helpers
