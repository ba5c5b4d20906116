"""verify recomputes the benchmark from the raw arm receipts, the way the gate computed it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flows.bench.compare import compare_arms
from flows.bench.report import ArmReport, Point, Sample, write_arm
from flows.cluster.boot.timeline import BootTimeline, RankTimeline
from flows.fileio import sha256_file
from flows.gates.base import GateResult, Outcome
from flows.gates.benchmark.rules import Focus, Role, arm_folder, run_session
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.gates.cold_boots.rules import (
    BootObservation,
    RankFigures,
    boot_row,
    cold_boots_verdict,
)
from flows.gates.cold_boots.summary import ColdBootsSummary
from flows.gates.determinism.rules import judge
from flows.gates.determinism.summary import PromptHashes
from flows.gates.outputs import Output, hashes
from flows.gates.traffic import Answered
from flows.record import verify
from flows.record.writer import open_record
from flows.spec.cluster import Cluster
from flows.spec.release import Release
from tests.support.bench_results import passed_benchmark


def _arm(label: str, level: float) -> ArmReport:
    factors = (0.998, 1.0, 1.002)
    return ArmReport(
        label=label, source="sparkgate", url="http://127.0.0.1:1", suite="tiny",
        started_utc="2026-12-02T00:00:00+00:00",
        points={"streams/c2": Point(workload="closed_loop", gate=["tps"],
                                    samples=[Sample(metrics={"tps": 100 * level * f})
                                             for f in factors])},
    )  # fmt: skip


def _bench_stage(out: Path) -> GateResult:
    """A real session (C, P, C, ...) on synthetic arms, kept as the gate keeps them."""
    levels: dict[str, list[float]] = {
        "candidate": [1.05, 1.051, 1.049, 1.05],
        "previous": [1.0] * 4,
    }
    ran: list[str] = []

    def measure(index: int, role: Role, focus: Focus) -> ArmReport:
        del focus  # every arm measures the one point
        report = _arm(f"{index}-{role}", levels[role][ran.count(role)])
        ran.append(role)
        write_arm(report, arm_folder(out, index, role))
        return report

    session = run_session(
        ["candidate", "previous", "candidate"], 7, measure,
        lambda new, old: compare_arms(new, old, tolerance_pct=3.0),
    )  # fmt: skip
    return passed_benchmark(session, out, "arm.json")


def _published(tmp_path: Path, release: Release, cluster: Cluster) -> Path:
    writer = open_record(
        tmp_path, release, build_digest="d", cluster=cluster, previous="r1", resume=False
    )
    result = _bench_stage(writer.stage_dir("benchmark"))
    summary = result.summary_as(BenchmarkSummary)
    assert summary is not None
    assert summary.points[0].verdict == "faster"
    writer.save_stage(result)
    return writer.publish(verdict="qualified", stage_order=["benchmark"], versions={})


def _rehash(path: Path, relative: str, stage: str = "benchmark") -> None:
    """Make record.json agree with an edited file, so only the recomputation can notice."""
    record: dict[str, Any] = json.loads((path / "record.json").read_text())
    for entry in record["stages"][stage]["files"]:
        if entry["path"] == relative:
            entry["sha256"] = sha256_file(path / relative)
            entry["bytes"] = (path / relative).stat().st_size
    (path / "record.json").write_text(json.dumps(record))


def test_benchmark_recomputed_from_raw_arms_verifies(
    tmp_path: Path, release_r2: Release, cluster: Cluster
) -> None:
    assert verify(_published(tmp_path, release_r2, cluster)) == []


def test_an_edited_receipt_changes_the_recomputed_points(
    tmp_path: Path, release_r2: Release, cluster: Cluster
) -> None:
    path = _published(tmp_path, release_r2, cluster)
    relative = "benchmark/arms/2-previous/arm.json"
    data = json.loads((path / relative).read_text())
    for sample in data["points"]["streams/c2"]["samples"]:
        sample["metrics"]["tps"] *= 1.2  # the previous release made to look faster
    (path / relative).write_text(json.dumps(data))
    _rehash(path, relative)
    problems = "\n".join(verify(path))
    assert "benchmark: streams/c2 tps: summary previous 100.0" in problems
    assert "raw arms give previous 120.0" in problems


def _completion(tokens: list[int], logprobs: list[float]) -> dict[str, Any]:
    return {
        "choices": [
            {
                "text": "".join(chr(97 + t % 26) for t in tokens),
                "token_ids": tokens,
                "logprobs": {
                    "token_logprobs": logprobs,
                    "top_logprobs": [{"a": lp} for lp in logprobs],
                },
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": len(tokens)},
    }


def _determinism_stage(out: Path, release: Release, cluster: Cluster) -> GateResult:
    """Raw responses as the gate keeps them, judged by the gate's own pure `judge`."""
    answers = {
        "p0": _completion([1, 2, 3], [-0.5, -0.25, -0.125]),
        "p1": _completion([4, 5], [-1.5, -0.75]),
    }
    runs = {
        name: [Answered(prompt, 0.01 * i, 0.5, answers[prompt]) for i, prompt in enumerate(answers)]
        for name in ("alone", "all-at-once", "after-traffic")
    }
    files = []
    for name, run in runs.items():
        raw = [
            {"prompt": a.prompt, "sent_s": a.sent_s, "answered_s": a.answered_s,
             "response": a.response}
            for a in run
        ]  # fmt: skip
        (out / "scenarios").mkdir(exist_ok=True)
        (out / "scenarios" / f"{name}.json").write_text(json.dumps(raw))
        files.append(f"scenarios/{name}.json")
    summary, outcome, reason = judge(
        runs, release.gates.determinism, release.outputs, previous=None, previous_hashes=None
    )
    return GateResult(
        gate="determinism", outcome=outcome, reason=reason, started_at=datetime.now(UTC),
        seconds=1.0, summary=summary, files=files,
    )  # fmt: skip


def test_determinism_is_judged_again_from_raw_responses(
    tmp_path: Path, release_r1: Release, cluster: Cluster
) -> None:
    writer = open_record(tmp_path, release_r1, build_digest="d", cluster=cluster, previous=None)
    result = _determinism_stage(writer.stage_dir("determinism"), release_r1, cluster)
    assert result.outcome == Outcome.PASSED
    writer.save_stage(result)
    path = writer.publish(verdict="qualified", stage_order=["determinism"], versions={})
    assert verify(path) == []
    relative = "determinism/scenarios/after-traffic.json"
    raw = json.loads((path / relative).read_text())
    raw[1]["response"]["choices"][0]["logprobs"]["token_logprobs"][1] = -0.7500001
    (path / relative).write_text(json.dumps(raw))
    _rehash(path, relative, stage="determinism")
    assert verify(path) == [
        "determinism: scenarios differs from the one the raw responses give",
        "determinism: outcome passed, the raw responses give failed",
    ]


def _boots_stage(out: Path) -> GateResult:
    """Two boots kept as the gate keeps them (timeline, compiles, spot outputs), judged by it."""
    spot = [Output(prompt="p0", token_ids=[1, 2], logprobs=[-0.5, -0.25])]
    reference = hashes(spot)
    seen, files = [], []
    for mode, prepare in (("warm", 0.5), ("all-kernels", 2.5)):
        timeline = BootTimeline(
            started_at=datetime.now(UTC), ready_s=prepare + 1.0,
            ranks=[
                RankTimeline(node=f"local{r}", rank=r, phases={"ready": prepare + 1.0},
                             kernels=6, compiled=0 if mode == "warm" else 6,
                             cached=6 if mode == "warm" else 0, prepare_s=prepare,
                             liveness_wait_s=0.2, compiles_after_preparation=0)
                for r in (0, 1)
            ],
        )  # fmt: skip
        emptied = [] if mode == "warm" else [0, 1]
        raw = {
            "mode": mode,
            "emptied": [{"node": f"local{r}", "rank": r, "kind": "kernels", "path": "/x"}
                        for r in emptied],
            "timeline": timeline.model_dump(mode="json"),
            "spot": [o.model_dump() for o in spot * 2],
            "compile_events": [], "compiles_metric": 0.0,
        }  # fmt: skip
        (out / "boots").mkdir(exist_ok=True)
        (out / "boots" / f"{mode}.json").write_text(json.dumps(raw))
        files.append(f"boots/{mode}.json")
        seen.append(
            BootObservation(
                mode=mode, emptied_ranks=emptied, ready_s=timeline.ready_s,
                ranks=[RankFigures(rank=r.rank, node=r.node, prepare_s=r.prepare_s,
                                   kernels=r.kernels, compiled=r.compiled, cached=r.cached,
                                   liveness_wait_s=r.liveness_wait_s) for r in timeline.ranks],
                compiles_metric=0.0, spot_check="identical",
            )
        )  # fmt: skip
    passed, reason = cold_boots_verdict(seen)
    assert passed
    summary = ColdBootsSummary(
        boots=[boot_row(s) for s in seen],
        reference={p: PromptHashes.model_validate(d) for p, d in reference.items()},
    )
    return GateResult(
        gate="cold_boots", outcome=Outcome.PASSED, reason=reason, started_at=datetime.now(UTC),
        seconds=1.0, summary=summary, files=files,
    )  # fmt: skip


def test_cold_boots_are_rebuilt_from_raw_boots(
    tmp_path: Path, release_r1: Release, cluster: Cluster
) -> None:
    writer = open_record(tmp_path, release_r1, build_digest="d", cluster=cluster, previous=None)
    writer.save_stage(_boots_stage(writer.stage_dir("cold_boots")))
    path = writer.publish(verdict="qualified", stage_order=["cold_boots"], versions={})
    assert verify(path) == []
    relative = "cold_boots/boots/all-kernels.json"
    raw = json.loads((path / relative).read_text())
    raw["timeline"]["ranks"][1]["prepare_s"] = 4.5
    raw["compile_events"] = [{"name": "compile_after_preparation"}]
    (path / relative).write_text(json.dumps(raw))
    _rehash(path, relative, stage="cold_boots")
    assert verify(path) == [
        "cold_boots: all-kernels: prepare_s_max is 2.5, the raw boot gives 4.5",
        "cold_boots: all-kernels: compiles_after_preparation is 0, the raw boot gives 1",
        "cold_boots: all-kernels: passed is True, the raw boot gives False",
    ]
