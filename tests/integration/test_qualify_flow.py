"""The qualification flow end to end on the real engine: Ctrl-C in the benchmark, then resume.

A trimmed r2 against r1 (few prompts, two boot modes, no release tests, a short suite and three
arms) keeps this to a few minutes. The first run is interrupted while the benchmark's second arm
boots; the second run must take the finished gates from the cache, keep the arm already
measured, measure the rest, publish a record that verifies and keeps the host facts its
preflight read, and leave no rank running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from flows.bench.hosts import FACTS_FILE, read_host_facts
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.record import read_record, verify
from tests.support.project import Project, ProjectKind, projects
from tests.support.waiting import wait_until

# the module's project: trimmed r1, and r2 against it on a short suite
pytestmark = [
    pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500),
    pytest.mark.prefect_server, projects(ProjectKind("qualtest", server=True)),
]  # fmt: skip


def _qualify_r2(project: Project) -> subprocess.Popen[str]:
    release = project.short_r2()
    return project.start("qualify", str(release), "-c", str(project.cluster), "--no-wait")


def _wait_for(path: Path, process: subprocess.Popen[str], timeout_s: float) -> None:
    def written() -> bool:
        assert process.poll() is None, f"qualify ended early:\n{process.communicate()[0]}"
        return path.exists()

    wait_until(written, timeout_s, f"{path} to be written")


def test_a_qualification_killed_in_the_benchmark_resumes_there(project: Project) -> None:
    record = project.root / "experiments" / f"{time.strftime('%Y-%m-%d')}-r2"
    first_arm = record / "benchmark" / "arms" / "1-candidate" / "arm.json"
    first = _qualify_r2(project)
    _wait_for(first_arm, first, 900)
    time.sleep(2)  # the second arm is booting
    os.killpg(first.pid, signal.SIGINT)
    output = first.communicate(timeout=120)[0]
    assert first.returncode != 0, output
    assert not (record / "README.md").exists(), "an interrupted run must not publish"
    assert not (record / "benchmark" / "result.json").exists()
    measured = first_arm.read_text()

    second = _qualify_r2(project)
    output = second.communicate(timeout=900)[0]
    published = read_record(record)
    benchmark = published.stages["benchmark"]
    summary = benchmark.summary_as(BenchmarkSummary)
    decision = summary.decision if summary is not None else None
    expected = {"pass": 0, "fail-inconclusive": 3}.get(str(decision), 1)  # as `bench compare`
    assert second.returncode == expected, output
    assert "determinism gate: cached" in output
    assert "cold boots: cached" in output
    assert "arm 1 (candidate, r2): measured by the interrupted run, kept" in output
    assert first_arm.read_text() == measured, "a finished arm is never measured again"
    bench = benchmark.summary_as(BenchmarkSummary)
    assert bench is not None
    assert bench.arms == ["candidate", "previous", "candidate"]
    assert benchmark.outcome in ("passed", "failed", "inconclusive"), benchmark.reason
    assert published.stages["determinism"].outcome == "passed"
    assert published.stages["cold_boots"].outcome == "passed"
    assert verify(record) == []
    # the host facts its preflight read are kept for `bench compare` (hashed like every file)
    facts = read_host_facts(record)
    assert (facts.cluster, facts.source) == ("qualtest", "preflight")
    assert set(facts.nodes) == {"qualtest0", "qualtest1"}
    for values in facts.nodes.values():
        assert {"page size", "kernel"} <= set(values)
        assert values["kernel"]
    assert FACTS_FILE in {entry.path for entry in published.extras}
    ranks = subprocess.run(
        ["pgrep", "-f", str(project.root / "n0")], check=False, capture_output=True
    )
    assert ranks.stdout == b"", "a rank is still running"
    summary = json.loads((record / "record.json").read_text())
    assert summary["verdict"] == published.verdict
