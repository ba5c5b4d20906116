"""Attack: `verify` skipped the benchmark recomputation whenever a record claimed ledger use.

A benchmark that drew on the A/A ledger of other records (`ledger_gaps` > 0) was never
recomputed, so anyone could edit its figures (result.json and record.json's copy, re-hashed) and
the record still verified. Now the gate keeps the very ledger it used in the record
(`benchmark/ledger-used.json`, hashed like every raw file) and verify recomputes the comparison
from the arms and that ledger; a record that claims ledger use but keeps no ledger fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flows.bench.compare import compare_arms
from flows.bench.ledger import Ledger, write_ledger
from flows.bench.report import ArmReport, Point, Sample, write_arm
from flows.fileio import sha256_file
from flows.gates.base import GateResult
from flows.gates.benchmark.rules import Focus, Role, arm_folder, run_session
from flows.record import verify
from flows.record.writer import open_record
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import load_release
from tests.support.bench_results import passed_benchmark

ROOT = Path(__file__).resolve().parents[2]
LEDGER_FILE = "ledger-used.json"
POINT = "streams/c2"
LEDGER = Ledger(
    gaps={f"{POINT}:tps": [0.004, -0.003, 0.002, -0.001]},
    sessions=["2026-11-30-r1: 1-candidate / 3-candidate", "calibration: arm 2 vs arm 1",
              "calibration: arm 3 vs arms 1-2", "calibration: arm 4 vs arms 1-3"],
)  # fmt: skip


def _arm(label: str, level: float) -> ArmReport:
    factors = (0.998, 1.0, 1.002)
    return ArmReport(
        label=label, source="sparkgate", url="http://127.0.0.1:1", suite="tiny",
        started_utc="2026-12-02T00:00:00+00:00",
        points={POINT: Point(workload="closed_loop", gate=["tps"],
                             samples=[Sample(metrics={"tps": 100 * level * f})
                                      for f in factors])},
    )  # fmt: skip


def _bench_stage(out: Path, *, keep_ledger: bool) -> GateResult:
    """A real C, P, C session drawn on a ledger, kept as the gate keeps it."""
    levels: dict[str, list[float]] = {"candidate": [1.05, 1.05], "previous": [1.0]}
    ran: list[str] = []

    def measure(index: int, role: Role, focus: Focus) -> ArmReport:
        del focus
        report = _arm(f"{index}-{role}", levels[role][ran.count(role)])
        ran.append(role)
        write_arm(report, arm_folder(out, index, role))
        return report

    session = run_session(
        ["candidate", "previous", "candidate"], 3, measure,
        lambda new, old: compare_arms(new, old, ledger=LEDGER, tolerance_pct=3.0),
    )  # fmt: skip
    assert session.comparison.ledger_gaps == len(LEDGER.sessions)
    if keep_ledger:
        write_ledger(LEDGER, out / LEDGER_FILE)
    return passed_benchmark(session, out, "*.json")


def _published(tmp_path: Path, *, keep_ledger: bool = True) -> Path:
    release = load_release(ROOT / "releases/r2.yaml")
    cluster = load_model(ROOT / "config/local.yaml", Cluster)
    writer = open_record(
        tmp_path, release, build_digest="d", cluster=cluster, previous="r1", resume=False
    )
    writer.save_stage(_bench_stage(writer.stage_dir("benchmark"), keep_ledger=keep_ledger))
    return writer.publish(verdict="qualified", stage_order=["benchmark"], versions={})


def _forge_previous_level(path: Path, factor: float) -> None:
    """Edit the previous release's level in result.json and record.json's copy, re-hashed, so
    only a recomputation from the raw files can notice."""
    result_file = path / "benchmark" / "result.json"
    result: dict[str, Any] = json.loads(result_file.read_text())
    point = result["summary"]["points"][0]
    point["previous"] = round(point["previous"] * factor, 4)
    result_file.write_text(json.dumps(result, indent=1))
    record: dict[str, Any] = json.loads((path / "record.json").read_text())
    stage = record["stages"]["benchmark"]
    stage["summary"] = result["summary"]
    stage["result"]["sha256"] = sha256_file(result_file)
    stage["result"]["bytes"] = result_file.stat().st_size
    (path / "record.json").write_text(json.dumps(record))


def _rehash(path: Path, relative: str) -> None:
    record: dict[str, Any] = json.loads((path / "record.json").read_text())
    for entry in record["stages"]["benchmark"]["files"]:
        if entry["path"] == relative:
            entry["sha256"] = sha256_file(path / relative)
            entry["bytes"] = (path / relative).stat().st_size
    (path / "record.json").write_text(json.dumps(record))


def test_verify_recomputes_a_benchmark_drawn_on_the_ledger(tmp_path: Path) -> None:
    assert verify(_published(tmp_path)) == []


def test_verify_ledger_claim_does_not_hide_an_edited_figure(tmp_path: Path) -> None:
    path = _published(tmp_path)
    _forge_previous_level(path, 0.9)  # the previous release made to look slower
    problems = "\n".join(verify(path))
    assert f"benchmark: {POINT} tps: summary previous 90.0" in problems, problems
    assert "raw arms give previous 100.0" in problems


def test_verify_ledger_edited_since_saved_changes_the_figures(tmp_path: Path) -> None:
    path = _published(tmp_path)
    relative = f"benchmark/{LEDGER_FILE}"
    kept = json.loads((path / relative).read_text())
    kept["gaps"][f"{POINT}:tps"] = [0.08, -0.09, 0.07, -0.06]  # noisier: a wider interval
    (path / relative).write_text(json.dumps(kept))
    _rehash(path, relative)
    problems = "\n".join(verify(path))
    assert f"benchmark: {POINT} tps: summary" in problems, problems


def test_verify_ledger_claim_without_the_ledger_fails(tmp_path: Path) -> None:
    path = _published(tmp_path, keep_ledger=False)
    problems = "\n".join(verify(path))
    assert "benchmark: the summary draws on 4 A/A ledger sessions" in problems, problems
    assert f"the record keeps no benchmark/{LEDGER_FILE}" in problems


def test_verify_benchmark_points_without_arms_fail(tmp_path: Path) -> None:
    """Dropping the arms from the summary is no way around the recomputation either."""
    path = _published(tmp_path)
    result_file = path / "benchmark" / "result.json"
    result: dict[str, Any] = json.loads(result_file.read_text())
    result["summary"]["arms"] = []
    result_file.write_text(json.dumps(result, indent=1))
    record: dict[str, Any] = json.loads((path / "record.json").read_text())
    record["stages"]["benchmark"]["summary"] = result["summary"]
    record["stages"]["benchmark"]["result"]["sha256"] = sha256_file(result_file)
    (path / "record.json").write_text(json.dumps(record))
    assert "benchmark: the summary has points but names no arms" in verify(path)
