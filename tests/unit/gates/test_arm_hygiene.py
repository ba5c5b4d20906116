"""Arm hygiene on the local cluster: real probe commands through the real local transport.

Each node's workdir holds a sysfs-like file the probe reads (`cat {workdir}/throttle`, as a
board's throttle reasons are read); the test changes it during an arm, as a throttling board
would, and the arm is marked disturbed, kept as evidence beside the arm that replaces it, and
measured again. The arms' measurements are synthetic (tests/unit/gates/test_benchmark_session.py's
Bench): booting the engine for every arm is not what is under test here.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from flows.bench.report import ArmReport, write_arm
from flows.cluster.probes.sampler import BASELINE_S, wait_until_cool
from flows.cluster.transport.local import LocalTransport
from flows.errors import BenchError, ClusterError
from flows.gates.base import GateContext
from flows.gates.benchmark import runner as benchmark
from flows.gates.benchmark.hygiene import PROBES_FILE, ArmHygiene, measure_until_clean
from flows.gates.benchmark.recompute import benchmark_problems
from flows.gates.benchmark.rules import Focus, Role, arm_folder
from flows.gates.benchmark.story import disturbed_line
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import BenchmarkGate, Release
from tests.support.overlays import overlay
from tests.support.paths import ROOT
from tests.unit.gates.test_benchmark_session import Bench, arm

THROTTLE = {
    "name": "throttle",
    "argv": ["cat", "{workdir}/throttle"],
    "parse": "number",
    "limits": [{"value": "value", "max": 0, "cool_max": 0}],
}


def _cluster(tmp_path: Path, **hygiene: float) -> Cluster:
    nodes = []
    for index in range(2):
        workdir = tmp_path / f"local{index}"
        workdir.mkdir()
        (workdir / "throttle").write_text("0\n")
        nodes.append({"name": f"local{index}", "rank": index, "head": index == 0,
                      "address": "127.0.0.1", "workdir": str(workdir)})  # fmt: skip
    settings = {"every_s": 0.2, "cooldown_timeout_s": 5, "remeasure": 1} | hygiene
    path = overlay(tmp_path / "cluster.yaml", "config/local.yaml", nodes=nodes,
                   probes={"samples": [THROTTLE], "hygiene": settings})  # fmt: skip
    return load_model(path, Cluster)


def _hygiene(cluster: Cluster) -> ArmHygiene:
    transports = {node.name: LocalTransport(node.name) for node in cluster.nodes}
    return ArmHygiene(cluster, transports)


def _throttle(cluster: Cluster, node: str, value: str) -> None:
    (Path(cluster.node(node).workdir) / "throttle").write_text(value + "\n")


def _arm(hygiene: ArmHygiene, out: Path, index: int, role: Role, during: list[str]) -> ArmReport:
    """One arm as measure_arm runs it: cool down, sample around the measurement, keep both."""
    hygiene.cool_down()
    with hygiene.watch():
        if during:
            _throttle(hygiene.cluster, "local1", during.pop(0))
        threading.Event().wait(0.5)  # the sampler reads at least twice during the arm
    report = arm(f"{index}-{role}", tps=100, ttft=0.2)
    write_arm(report, arm_folder(out, index, role))
    hygiene.keep(arm_folder(out, index, role))
    return report


def test_a_limit_crossed_during_an_arm_marks_it_keeps_it_and_measures_it_again(
    tmp_path: Path,
) -> None:
    cluster = _cluster(tmp_path)
    hygiene = _hygiene(cluster)
    out = tmp_path / "out"
    during = ["32"]  # the first attempt throttles (0x20, a thermal slowdown); the second not
    # the board stays throttled after the first attempt until the cool-down sees it recover
    threading.Timer(1.5, _throttle, (cluster, "local1", "0")).start()
    measure_until_clean(
        lambda: _arm(hygiene, out, 1, "candidate", during),
        hygiene, out, 1, "candidate", lambda: True,
    )  # fmt: skip
    kept = out / "arms" / "1-candidate-disturbed-1"
    assert (kept / "arm.json").is_file()
    evidence = json.loads((kept / PROBES_FILE).read_text())
    assert [c["node"] for c in evidence["crossings"]] == ["local1"]
    assert evidence["crossings"][0]["seen"] == 32
    assert {r["phase"] for r in evidence["readings"]} == {"before", "during", "after"}
    clean = json.loads((out / "arms" / "1-candidate" / PROBES_FILE).read_text())
    assert clean["crossings"] == []
    [disturbed] = hygiene.disturbed
    assert disturbed.folder == "1-candidate-disturbed-1"
    assert disturbed.reasons[0].startswith("local1 throttle value 32 (above max 0) at ")


def test_an_arm_disturbed_every_time_fails_with_the_crossings(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, cooldown_timeout_s=5)
    hygiene = _hygiene(cluster)
    out = tmp_path / "out"

    def throttled() -> ArmReport:
        _throttle(cluster, "local1", "0")  # cooled between attempts, throttled during each
        return _arm(hygiene, out, 2, "previous", ["8"])

    with pytest.raises(BenchError, match=r"arm 2 \(previous\) was disturbed every time "
                       r"\(measured 2 times; remeasure 1\): local1 throttle value 8"):  # fmt: skip
        measure_until_clean(throttled, hygiene, out, 2, "previous", lambda: True)
    assert sorted(p.name for p in (out / "arms").iterdir()) == [
        "2-previous-disturbed-1", "2-previous-disturbed-2"
    ]  # fmt: skip


def test_a_node_that_does_not_cool_down_fails_with_its_readings(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, cooldown_timeout_s=0.5)
    _throttle(cluster, "local0", "4")
    with pytest.raises(ClusterError, match=r"did not cool down within 0.5s: local0 throttle "
                       r"value 4 above 0$"):  # fmt: skip
        _hygiene(cluster).cool_down()


def test_the_first_cool_down_takes_a_baseline_so_steal_has_a_reading(tmp_path: Path) -> None:
    """Steal is a rate between two /proc/stat readings; without a baseline round the first
    cool-down saw "no reading" and waited a whole `every_s` before the first arm."""
    cluster = load_model(ROOT / "config/local.yaml", Cluster)
    cluster = cluster.model_copy(
        update={"probes": cluster.probes.model_copy(
            update={"hygiene": cluster.probes.hygiene.model_copy(update={"every_s": 30})}
        )}
    )  # fmt: skip
    said: list[str] = []
    slept: list[float] = []
    sampler = _hygiene(cluster).sampler
    latest = wait_until_cool(sampler, cluster, say=said.append, sleep=slept.append)
    assert slept == [BASELINE_S]  # the baseline's short window, never a 30 s round
    assert not [line for line in said if "no reading" in line], said
    steal = [r.values["steal_pct"] for r in latest if r.probe == "cpu"]
    assert len(steal) == len(cluster.nodes), latest


def test_the_gate_re_measures_a_disturbed_arm_and_its_record_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the gate: arm 2 is disturbed once; the summary names it and verify agrees."""
    cluster = _cluster(tmp_path)
    bench = Bench(candidate=[1.0] * 7, previous=[1.0] * 8)
    during = {2: ["1"]}

    def measure(
        context: GateContext, suite: object, out_dir: Path, index: int, role: Role,
        focus: Focus = None, hygiene: ArmHygiene | None = None,
    ) -> ArmReport:  # fmt: skip
        del context, suite
        assert hygiene is not None
        if not during.get(index):
            _throttle(cluster, "local1", "0")
        hygiene.cool_down()
        with hygiene.watch():
            for value in during.get(index, [])[:1]:
                _throttle(cluster, "local1", value)
                during[index].pop(0)
            threading.Event().wait(0.3)
        report = bench.measure(index, role, focus)
        write_arm(report, arm_folder(out_dir, index, role))
        hygiene.keep(arm_folder(out_dir, index, role))
        return report

    monkeypatch.setattr(benchmark, "measure_arm", measure)
    context = GateContext(
        cluster=cluster, release=load_model(ROOT / "releases/r2.yaml", Release),
        previous=load_model(ROOT / "releases/r1.yaml", Release),
        transports={node.name: LocalTransport(node.name) for node in cluster.nodes},
        state=tmp_path / "state", experiments=tmp_path / "experiments",
    )  # fmt: skip
    out = tmp_path / "out"
    settings = BenchmarkGate(suite=str(ROOT / "config/suites/release.yaml"), max_arms=5)
    result = benchmark.run_benchmark(context, settings, out)
    summary = result.summary_as(BenchmarkSummary)
    assert summary is not None, result.reason
    assert [(d.index, d.role, d.folder) for d in summary.disturbed] == [
        (2, "previous", "2-previous-disturbed-1")
    ]
    assert summary.arms[:3] == ["candidate", "previous", "candidate"]
    assert (out / "arms" / "2-previous-disturbed-1" / PROBES_FILE).is_file()
    assert (out / "arms" / "2-previous" / PROBES_FILE).is_file()
    assert benchmark_problems(out, summary, settings.max_arms) == []
    assert disturbed_line(summary).startswith(
        "Measured again (a host crossed a probe limit; kept under arms/): arm 2 (previous, "
        "2-previous-disturbed-1: local1 throttle value 1 (above max 0) at "
    )
