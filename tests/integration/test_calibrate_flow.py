"""`sparkgate calibrate --gated-only` end to end on the real engine: two fresh arms, one A/A gap
of the gating workload, verified.

A trimmed r1 names a tiny suite (two short workloads, one of them reported only, two samples, no
warm-up) so each arm is a boot plus seconds of traffic on a private two-node cluster; the
reported workload must not be measured at all. The calibration must publish its
record under experiments/calibration/ (its stages on the board qualify uses, no Prefect line
without -v), say what the grown ledger lets the release's benchmark resolve, its gap must be
what the benchmark gate of a later qualification on the same cluster shape and suite draws on
(`ledger_for`), and `sparkgate verify` must pass on the record. The runs go to the session's
Prefect server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.gates.base import GateContext
from flows.gates.benchmark.summary import CalibrationSummary
from flows.record import read_record
from flows.record.aa_ledger import CALIBRATION_DIR, ledger_for
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import load_release
from tests.support.overlays import overlay, write_yaml
from tests.support.prefect_server import Server
from tests.support.project import Project

pytestmark = [
    pytest.mark.integration, pytest.mark.slow, pytest.mark.prefect_server,
    pytest.mark.timeout(1200),
]  # fmt: skip

SUITE = {
    "kind": "suite", "name": "calibrate-test", "seed": 0, "samples": 2, "warmup": 0,
    "workloads": [
        {"kind": "single_stream", "name": "single", "requests": 2, "prompt_tokens": 32,
         "max_tokens": 8, "gate": False},
        {"kind": "closed_loop", "name": "streams", "concurrency": [2], "prompt_tokens": 32,
         "max_tokens": 8},
    ],
}  # fmt: skip


def test_calibrate_publishes_gaps_the_benchmark_gate_uses(
    tmp_path: Path, prefect_api: Server
) -> None:
    project = Project(tmp_path, "calibtest")
    project.use_server(prefect_api)
    suite = write_yaml(tmp_path / "suites/calibrate-test.yaml", SUITE)
    benchmark = {"suite": str(suite)}
    release = overlay(
        tmp_path / "calibrate/r1.yaml", "releases/r1.yaml", gates={"benchmark": benchmark}
    )
    try:
        done = project.run(
            "calibrate", str(release), "--arms", "2", "--gated-only", "-c", str(project.cluster),
            "--json",
            timeout=1100,
        )  # fmt: skip
    finally:
        project.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    # what the grown ledger lets the release's benchmark resolve, per gated point
    assert "this cluster resolves ±" in done.stderr, done.stderr
    assert "on streams/c2 after 3 arms" in done.stderr, done.stderr
    assert "single/c1" not in done.stderr, done.stderr  # reported only: neither run nor forecast
    board = done.stderr.splitlines()  # the stage board, one line per change off a terminal
    for line in ("cluster lock: passed", "A/A calibration: running", "A/A calibration: passed"):
        assert any(said.startswith(line) for said in board), done.stderr
    assert "Flow run '" not in done.stderr  # Prefect's own lines only with -v
    outcome = json.loads(done.stdout)
    assert outcome["verdict"] == "passed"
    assert (outcome["gaps_added"], outcome["ledger_sessions"]) == (1, 1)
    folder = Path(outcome["record"])
    assert folder.parent == tmp_path / "experiments" / CALIBRATION_DIR
    record = read_record(folder)
    assert record.status == "published"
    summary = record.stages["calibration"].summary_as(CalibrationSummary)
    assert summary is not None
    assert summary.arms == 2
    assert "(calibrate-test, gated workloads only, without single)" in outcome["reason"]
    for arm in ("1-candidate", "2-candidate"):
        measured = json.loads((folder / "calibration" / "arms" / arm / "arm.json").read_text())
        assert sorted(measured["points"]) == ["streams/c2"], arm

    chosen = load_release(release)
    cluster = load_model(project.cluster, Cluster)
    context = GateContext(
        cluster=cluster, release=chosen, previous=None, transports={},
        state=tmp_path / "state", experiments=tmp_path / "experiments",
    )  # fmt: skip
    ledger = ledger_for(context, chosen.gates.benchmark)
    assert ledger.sessions == [f"{folder.name}: calibrate r1: arm 2 vs arm 1"]
    assert ledger.gaps, "no gap reached the ledger"
    assert all(name.startswith("streams/c2:") for name in ledger.gaps), ledger.gaps
    assert all(len(values) == 1 for values in ledger.gaps.values())

    verified = project.run("verify", str(folder))
    assert verified.returncode == 0, verified.stdout + verified.stderr
