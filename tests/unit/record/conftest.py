"""Synthetic gate results of all four gates, with raw files, for the record tests.

Each factory writes the raw files a real gate would (JUnit XML, determinism and benchmark
receipts) into the stage folder it is given, and returns a GateResult with the summary shape
the gates contract fixes, so the record code is exercised exactly as the flow will use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from flows.gates.base import GateResult, Outcome
from flows.record.writer import RecordWriter, open_record
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release, load_release

ROOT = Path(__file__).resolve().parents[3]
STARTED = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)
DAY = date(2026, 12, 2)
HASHES = {f"p{i}": {"tokens": f"t{i}" * 8, "logprobs": f"l{i}" * 8} for i in range(4)}

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
    summary = {
        "passed": 3,
        "failed": 0,
        "errors": 0,
        "skipped": 1,
        "seconds": 0.4,
        "files": [
            {"file": "tests/test_kernels.py", "outcome": "passed", "tests": 2, "seconds": 0.2},
            {"file": "tests/test_api.py", "outcome": "passed", "tests": 2, "seconds": 0.2},
        ],
        "excluded": [{"file": "tests/test_gpu_only.py", "reason": "needs a GPU the CI lacks"}],
        "node": "local0",
    }
    return GateResult(
        gate="release_tests",
        outcome=Outcome.PASSED,
        reason="3 passed, 1 skipped",
        started_at=STARTED,
        seconds=5.5,
        summary=summary,
        files=["junit.xml"],
    )


def determinism_result(out: Path, *, hashes: dict[str, Any] | None = None) -> GateResult:
    scenarios = [
        {"name": name, "identical": 4, "differing": 0, "first_difference": None}
        for name in ("all-at-once", "staggered", "long-prefill", "prefix-cached", "after-traffic")
    ]
    (out / "responses.jsonl").write_text(json.dumps({"prompt": "p0", "tokens": [1, 2]}) + "\n")
    summary = {
        "prompts": 4,
        "scenarios": scenarios,
        "against_previous": {
            "mode": "unchanged",
            "identical": 4,
            "total": 4,
            "top_token_agreement": None,
            "reason": "outputs declared unchanged",
        },
        "hashes": hashes if hashes is not None else HASHES,
    }
    return GateResult(
        gate="determinism",
        outcome=Outcome.PASSED,
        reason="every scenario identical; identical to r1",
        started_at=STARTED,
        seconds=30.0,
        summary=summary,
        files=["responses.jsonl"],
    )


def boots_result(out: Path) -> GateResult:
    def boot(mode: str, ready: float, compiled: int) -> dict[str, Any]:
        return {
            "mode": mode,
            "ready_s": ready,
            "prepare_s_max": ready / 2,
            "kernels": 12,
            "compiled": compiled,
            "cached": 12 - compiled,
            "liveness_wait_s_max": 0.4,
            "compiles_after_preparation": 0,
            "spot_check": "identical",
            "what_happened": f"{compiled} kernels compiled before the rendezvous",
            "passed": True,
            "error": None,
            "ranks": [
                {
                    "rank": r,
                    "node": f"local{r}",
                    "prepare_s": ready / 2,
                    "kernels": 6,
                    "compiled": compiled // 2,
                    "cached": 6 - compiled // 2,
                    "liveness_wait_s": 0.4,
                }
                for r in (0, 1)
            ],
        }

    (out / "boots.json").write_text("[]\n")
    summary = {
        "boots": [
            boot("warm", 3.2, 0),
            boot("one-rank-kernels", 6.5, 6),
            boot("all-kernels", 7.25, 12),
            boot("all-jit", 9.0, 12),
        ]
    }
    return GateResult(
        gate="cold_boots",
        outcome=Outcome.PASSED,
        reason="4 boots ready, nothing compiled after preparation",
        started_at=STARTED,
        seconds=60.0,
        summary=summary,
        files=["boots.json"],
    )


def bench_result(out: Path) -> GateResult:
    (out / "compare.json").write_text("{}\n")
    points = [
        {
            "point": "decode/prose-c1",
            "unit": "step_ms",
            "higher_is_better": False,
            "previous": 40.84,
            "candidate": 38.21,
            "change": -6.4,
            "low": -9.9,
            "high": -3.6,
            "verdict": "faster",
        },
        {
            "point": "prefill/2k",
            "unit": "prefill_tps",
            "higher_is_better": True,
            "previous": 4033.5,
            "candidate": 4040.1,
            "change": 0.2,
            "low": -1.1,
            "high": 1.4,
            "verdict": "level",
        },
    ]
    return GateResult(
        gate="benchmark",
        outcome=Outcome.PASSED,
        reason="no point slower than the tolerance",
        started_at=STARTED,
        seconds=120.0,
        # Drawn on an A/A ledger of other records, so verify cannot recompute the points from
        # this record's arms (test_recompute.py covers a session that it can recompute).
        summary={
            "arms": ["candidate", "previous", "candidate"],
            "tolerance": 0.03,
            "ledger_gaps": 2,
            "points": points,
        },
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
