"""Synthetic gate results of all four gates, with raw files, for the record tests.

Each factory writes the raw files a real gate would (JUnit XML, determinism receipts, the arms
and ledger of a real benchmark session) into the stage folder it is given, and returns a
GateResult with a summary built from the gates' typed models (tests/support/summaries.py, the
benchmark's by the gate's own session code), so the record code is exercised exactly as the
flow will use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from flows.bench.compare import compare_arms
from flows.bench.ledger import Ledger, write_ledger
from flows.bench.report import ArmReport, Point, Sample, write_arm
from flows.gates.base import GateResult, Outcome
from flows.gates.benchmark.rules import (
    LEDGER_FILE,
    Focus,
    Role,
    arm_folder,
    points_summary,
    run_session,
)
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.gates.determinism.rules import PREVIOUS_FILE, previous_copy
from flows.gates.determinism.summary import PromptHashes
from flows.record.writer import RecordWriter, open_record
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release, load_release

from . import summaries
from .paths import ROOT

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


BENCH_LEVELS = {
    "candidate": {"decode/prose-c1": 38.21, "prefill/2k": 4040.1},
    "previous": {"decode/prose-c1": 40.84, "prefill/2k": 4033.5},
}
BENCH_LEDGER = Ledger(
    gaps={"decode/prose-c1:step_ms": [0.01, -0.012], "prefill/2k:prefill_tps": [0.004, -0.003]},
    sessions=["2026-11-30-r1: 1-candidate / 3-candidate", "calibration: arm 2 vs arm 1"],
)


def _bench_arm(label: str, role: Role) -> ArmReport:
    spread = (0.999, 1.0, 1.001)
    points = {
        name: Point(
            workload="closed_loop" if name.startswith("decode/") else "prefill",
            gate=[metric],
            samples=[Sample(metrics={metric: BENCH_LEVELS[role][name] * f}) for f in spread],
        )
        for name, metric in (("decode/prose-c1", "step_ms"), ("prefill/2k", "prefill_tps"))
    }
    return ArmReport(
        label=label, source="sparkgate", url="http://127.0.0.1:1", suite="tiny",
        started_utc="2026-12-02T00:00:00+00:00", points=points,
    )  # fmt: skip


def bench_result(out: Path) -> GateResult:
    """A real C, P, C session drawn on an A/A ledger of 2 gaps, kept as the gate keeps it (arms
    and the ledger it used), so verify recomputes it: decode 6.4 % faster, prefill level."""

    def measure(index: int, role: Role, focus: Focus) -> ArmReport:
        del focus
        report = _bench_arm(f"{index}-{role}", role)
        write_arm(report, arm_folder(out, index, role))
        return report

    write_ledger(BENCH_LEDGER, out / LEDGER_FILE)
    session = run_session(
        ["candidate", "previous", "candidate"], 7, measure,
        lambda new, old: compare_arms(new, old, ledger=BENCH_LEDGER, tolerance_pct=3.0),
    )  # fmt: skip
    (out / "compare.json").write_text(session.comparison.model_dump_json() + "\n")
    return GateResult(
        gate="benchmark",
        outcome=Outcome.PASSED,
        reason="no point slower than the tolerance",
        started_at=STARTED,
        seconds=120.0,
        summary=BenchmarkSummary(
            arms=list(session.roles),
            tolerance=0.03,
            decision=session.decision.value,
            ledger_gaps=session.comparison.ledger_gaps,
            points=points_summary(session),
        ),
        files=sorted(p.relative_to(out).as_posix() for p in out.rglob("*.json")),
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
