"""The benchmark gate on a private local cluster: r2 against r1 with two tiny suites, three arms.

Who wins is not asserted (a shared two-core machine is noisy); the machinery is: fresh boots
in session order, raw receipts per arm, compare.json, and a verdict on every point. The cluster
is the local one's head alone (one rank): the gate does not care how many ranks an arm boots,
and the head's installed build is then shared with the release-tests tests of the session
(installing a build on a node costs about 100 s here).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flows.bench.policy import CLIENT_METRICS
from flows.bench.report import read_arm
from flows.cluster.boot.session import load_session
from flows.cluster.transport.local import LocalTransport
from flows.gates.base import GateContext, GateResult, Outcome
from flows.gates.benchmark.recompute import benchmark_problems
from flows.gates.benchmark.runner import run_benchmark
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.spec.cluster import Cluster
from flows.spec.gate_policy import ENGINE_LEVEL
from flows.spec.load import load_model
from flows.spec.probes import HostSample, Hygiene, Limit, Probes
from flows.spec.release import BenchmarkGate, Release
from tests.support.overlays import write_yaml
from tests.support.paths import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TINY = {
    "kind": "suite",
    "name": "tiny",
    "seed": 0,
    "samples": 2,
    "warmup": 0,
    "workloads": [
        {"kind": "single_stream", "name": "single", "requests": 1, "prompt_tokens": 16,
         "max_tokens": 8},
    ],
}  # fmt: skip
# A second suite in the same gate: its points are named tiny-b:..., and its sampled workload
# (temperature 1, seeded) is reported, never gated.
TINY_B = {
    "kind": "suite",
    "name": "tiny-b",
    "seed": 0,
    "samples": 2,
    "warmup": 0,
    "workloads": [
        {"kind": "closed_loop", "name": "streams", "concurrency": [2], "prompt_tokens": 16,
         "max_tokens": 8},
        {"kind": "closed_loop", "name": "sampled", "concurrency": [2], "prompt_tokens": 16,
         "max_tokens": 8, "temperature": 1.0, "top_p": 0.95, "gate": False},
    ],
}  # fmt: skip


def _summary(result: GateResult) -> dict[str, Any]:
    """The gate's typed summary, as the JSON the record keeps."""
    assert result.summary is not None, result.reason
    return result.summary.model_dump(mode="json")


def test_r2_against_r1_runs_three_fresh_arms_and_decides_every_point(
    local_cluster: Cluster,
    transports: dict[str, LocalTransport],
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    shared = ROOT / ".sparkgate" / "build-cache"
    shared.mkdir(parents=True, exist_ok=True)
    (state / "build-cache").symlink_to(shared, target_is_directory=True)
    suites = [write_yaml(tmp_path / "tiny.yaml", TINY), write_yaml(tmp_path / "b.yaml", TINY_B)]
    candidate = load_model(ROOT / "releases/r2.yaml", Release)
    previous = load_model(ROOT / "releases/r1.yaml", Release)
    lines: list[str] = []
    cluster = local_cluster.model_copy(update={"nodes": [local_cluster.head]})
    context = GateContext(
        cluster=cluster, release=candidate, previous=previous, transports=dict(transports),
        state=state, experiments=tmp_path / "experiments", say=lines.append,
    )  # fmt: skip
    settings = BenchmarkGate(suite=[str(suite) for suite in suites], max_arms=3)
    out = tmp_path / "bench"
    result = run_benchmark(context, settings, out)

    # three arms of two samples decide what they can: any outcome, as long as it is the decision's
    decided = {
        "pass": Outcome.PASSED, "fail-slower": Outcome.FAILED,
        "fail-lost-measurements": Outcome.FAILED, "fail-inconclusive": Outcome.INCONCLUSIVE,
    }  # fmt: skip
    assert result.outcome is decided[_summary(result)["decision"]], result.reason
    assert result.reason
    assert _summary(result)["arms"] == ["candidate", "previous", "candidate"]
    releases = []
    for name in ("1-candidate", "2-previous", "3-candidate"):
        arm = read_arm(out / "arms" / name)
        assert arm.label == name
        assert arm.points
        assert all(point.samples for point in arm.points.values())
        releases.append(arm.identity["release"])
    assert releases == ["r2", "r1", "r2"]
    compared = json.loads((out / "compare.json").read_text())
    assert compared["new"] == ["1-candidate", "3-candidate"]
    assert compared["old"] == ["2-previous"]
    points = _summary(result)["points"]
    loop = [*CLIENT_METRICS["closed_loop"], *ENGINE_LEVEL]
    expected = {("tiny:single/c1", m) for m in [*CLIENT_METRICS["single_stream"], *ENGINE_LEVEL]}
    expected |= {(f"tiny-b:{name}/c2", m) for name in ("streams", "sampled") for m in loop}
    assert {(p["point"], p["unit"]) for p in points} == expected
    # the engine's CPU time per step decides; the client's and the step's wall time are reported,
    # and so is every metric of the sampled workload (gate: false in its suite)
    gated = {(p["point"], p["unit"]) for p in points if p["gated"]}
    assert gated == {("tiny:single/c1", "engine_cpu_ms"), ("tiny-b:streams/c2", "engine_cpu_ms")}
    assert read_arm(out / "arms" / "1-candidate").suite == "tiny+tiny-b"
    for point in points:
        assert point["verdict"] in ("faster", "level", "slower", "inconclusive")
        assert point["previous"] > 0
        assert point["candidate"] > 0
    assert load_session(state, cluster.name) is None  # every arm was stopped
    # the local cluster's host probes sampled every arm, and none of these ordinary arms crossed
    # a limit (config/local.yaml leaves a wide margin: docs/host-probes.md)
    assert _summary(result)["disturbed"] == []
    for name in ("1-candidate", "2-previous", "3-candidate"):
        probes = json.loads((out / "arms" / name / "probes.json").read_text())
        assert {r["phase"] for r in probes["readings"]} >= {"before", "after"}
        assert probes["crossings"] == []
    assert any("arm 3 (candidate, r2)" in line for line in lines)


def test_an_arm_during_which_a_probe_crossed_its_limit_is_kept_and_measured_again(
    local_cluster: Cluster,
    transports: dict[str, LocalTransport],
    tmp_path: Path,
) -> None:
    """Real arms of the bundled engine; the head's probe reads a sysfs-like file in its workdir
    (as a board's throttle reasons are read), which this test sets while arm 2 measures."""
    state = tmp_path / "state"
    state.mkdir()
    shared = ROOT / ".sparkgate" / "build-cache"
    shared.mkdir(parents=True, exist_ok=True)
    (state / "build-cache").symlink_to(shared, target_is_directory=True)
    suite = write_yaml(tmp_path / "tiny.yaml", TINY)
    head = local_cluster.head
    throttle = Path(head.workdir) / "throttle"
    throttle.parent.mkdir(parents=True, exist_ok=True)
    throttle.write_text("0\n")
    probe = HostSample(
        name="throttle", argv=["cat", "{workdir}/throttle"], parse="number",
        limits=[Limit(value="value", max=0, cool_max=0)],
    )  # fmt: skip
    probes = Probes(samples=[probe], hygiene=Hygiene(every_s=0.5, cooldown_timeout_s=60))
    cluster = local_cluster.model_copy(update={"nodes": [head], "probes": probes})
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if line.startswith("arm 2 (previous, r1): ready") and "disturbed" not in " ".join(lines):
            throttle.write_text("32\n")  # a thermal slowdown while the arm measures ...
        if line.startswith("cooling down"):
            throttle.write_text("0\n")  # ... that the next arm's cool-down waits out

    context = GateContext(
        cluster=cluster, release=load_model(ROOT / "releases/r2.yaml", Release),
        previous=load_model(ROOT / "releases/r1.yaml", Release), transports=dict(transports),
        state=state, experiments=tmp_path / "experiments", say=say,
    )  # fmt: skip
    settings = BenchmarkGate(suite=str(suite), max_arms=3)
    out = tmp_path / "bench"
    result = run_benchmark(context, settings, out)
    summary = _summary(result)
    assert [(d["index"], d["role"], d["folder"]) for d in summary["disturbed"]] == [
        (2, "previous", "2-previous-disturbed-1")
    ], result.reason
    assert summary["disturbed"][0]["reasons"][0].startswith(
        "local0 throttle value 32 (above max 0)"
    )
    assert summary["arms"] == ["candidate", "previous", "candidate"]
    kept = out / "arms" / "2-previous-disturbed-1"
    assert read_arm(kept).identity["release"] == "r1"  # the disturbed arm's receipts, kept
    assert json.loads((kept / "probes.json").read_text())["crossings"]
    again = json.loads((out / "arms" / "2-previous" / "probes.json").read_text())
    assert again["crossings"] == []
    assert any("cooling down" in line for line in lines)  # arm 2 again waited for the board
    assert benchmark_problems(out, result.summary_as(BenchmarkSummary), 3) == []
