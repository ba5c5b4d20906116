"""Host layers on the local cluster: real commands through the real local transport.

Each node's workdir holds a sysfs-like file (`knob`) that the cluster's fact probe reads
(`cat {workdir}/knob`, as an APST timeout or a governor is read) and that the layer's apply and
revert commands write, as `echo ... > /sys/...` would on a Spark. The benchmark's measurements
are synthetic (the arm's level follows the knob each node holds while the arm runs): booting
the engine for every arm is not what is under test; switching the hosts around arms is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from flows.bench.report import ArmReport
from flows.cluster.ops.host_layers import host_layers_on
from flows.cluster.probes.layers import HostRecord, with_layers_on
from flows.cluster.transport.base import Transport
from flows.cluster.transport.local import LocalTransport
from flows.errors import ClusterError, SpecError
from flows.gates.base import GateContext
from flows.gates.benchmark import runner as benchmark
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.pipeline.inputs import QualificationInputs, load_inputs
from flows.spec.cluster import Cluster
from flows.spec.host import HostLayer
from flows.spec.load import load_model
from flows.spec.release import BenchmarkGate, Release
from tests.support.overlays import overlay, write_yaml
from tests.support.paths import ROOT
from tests.unit.gates.test_benchmark_session import arm

KNOB_FACT = {"name": "knob", "argv": ["cat", "{workdir}/knob"], "parse": "number", "at_most": 0}
LAYER: dict[str, Any] = {
    "name": "knob-on",
    "description": "the knob set to 1 (a sysfs setting)",
    "facts": {"knob": {"at_least": 1}},
    "apply": ["sh", "-c", "echo 1 > {workdir}/knob"],
    "revert": ["sh", "-c", "echo 0 > {workdir}/knob"],
}


def _cluster_file(tmp_path: Path) -> Path:
    nodes = []
    for index in range(2):
        workdir = tmp_path / f"local{index}"
        workdir.mkdir()
        (workdir / "knob").write_text("0\n")
        nodes.append({"name": f"local{index}", "rank": index, "head": index == 0,
                      "address": "127.0.0.1", "workdir": str(workdir)})  # fmt: skip
    return overlay(tmp_path / "cluster.yaml", "config/local.yaml", nodes=nodes,
                   probes={"facts": [KNOB_FACT]})  # fmt: skip


def release_file(tmp_path: Path, *layers: dict[str, Any], **settings: Any) -> Path:
    """r3: r2's build and options, with `layers` on the hosts (r2.yaml beside it)."""
    folder = tmp_path / "releases"
    write_yaml(folder / "r1.yaml", {"extends": str(ROOT / "releases/r1.yaml")})
    write_yaml(folder / "r2.yaml", {"extends": str(ROOT / "releases/r2.yaml")})
    return overlay(folder / "r3.yaml", "releases/r2.yaml", name="r3", previous="r2",
                   description="the knob on every node", host=list(layers),
                   **settings)  # fmt: skip


def _knobs(cluster: Cluster) -> list[str]:
    return [(Path(node.workdir) / "knob").read_text().strip() for node in cluster.nodes]


def _transports(cluster: Cluster) -> dict[str, LocalTransport]:
    return {node.name: LocalTransport(node.name) for node in cluster.nodes}


def test_a_reversible_layer_is_on_for_the_body_and_reverted_after_it(tmp_path: Path) -> None:
    inputs = load_inputs(release_file(tmp_path, LAYER), _cluster_file(tmp_path))
    cluster = inputs.cluster
    saved: list[HostRecord] = []
    with host_layers_on(cluster, inputs.release.host, _transports(cluster),
                        on_step=saved.append) as host:  # fmt: skip
        assert host is not None
        assert _knobs(cluster) == ["1", "1"]  # the gates before the benchmark run with it on
    assert _knobs(cluster) == ["0", "0"]
    steps = [(s.action, [r.value for r in s.readings]) for s in saved[-1].steps]
    assert steps == [("revert", [0, 0]), ("apply", [1, 1]), ("revert", [0, 0])]
    assert all(r.problem is None for s in saved[-1].steps for r in s.readings)


def test_a_failure_in_the_body_leaves_the_cluster_reverted(tmp_path: Path) -> None:
    inputs = load_inputs(release_file(tmp_path, LAYER), _cluster_file(tmp_path))
    cluster = inputs.cluster
    with (
        pytest.raises(RuntimeError, match="a gate crashed"),
        host_layers_on(cluster, inputs.release.host, _transports(cluster)),
    ):
        raise RuntimeError("a gate crashed")
    assert _knobs(cluster) == ["0", "0"]


def test_a_layer_whose_facts_do_not_follow_fails_naming_node_fact_and_values(
    tmp_path: Path,
) -> None:
    """An apply that does not take on one node (a read-only sysfs file, say) stops the run
    before any gate, and the cluster is reverted."""
    broken = LAYER | {"apply": ["sh", "-c", "[ {node} = local1 ] || echo 1 > {workdir}/knob"]}
    inputs = load_inputs(release_file(tmp_path, broken), _cluster_file(tmp_path))
    cluster = inputs.cluster
    with (
        pytest.raises(ClusterError, match=r"^host layer knob-on: local1: knob-on apply: knob is 0, "
                      r"expected at least 1$"),
        host_layers_on(cluster, inputs.release.host, _transports(cluster)),
    ):  # fmt: skip
        pytest.fail("the body must not run")
    assert _knobs(cluster) == ["0", "0"]


def test_a_failing_apply_command_names_the_node_and_its_output(tmp_path: Path) -> None:
    failing = LAYER | {"apply": ["sh", "-c", "echo permission denied >&2; exit 1"]}
    inputs = load_inputs(release_file(tmp_path, failing), _cluster_file(tmp_path))
    cluster = inputs.cluster
    with (
        pytest.raises(ClusterError, match=r"knob-on: apply on local\d exited 1: permission denied"),
        host_layers_on(cluster, inputs.release.host, _transports(cluster)),
    ):
        pytest.fail("the body must not run")


def test_a_layer_naming_a_fact_the_cluster_does_not_probe_is_refused_at_its_line(
    tmp_path: Path,
) -> None:
    unknown = LAYER | {"facts": {"governor": {"expect": "performance"}}}
    release = release_file(tmp_path, unknown)
    with pytest.raises(SpecError) as refused:
        load_inputs(release, _cluster_file(tmp_path))
    assert refused.value.exit_code == 2
    assert str(refused.value).startswith(f"{release}:")
    said = (
        "host[0].facts.governor: layer 'knob-on' names fact 'governor', which the cluster does "
        "not probe (expected one of the cluster's probes.facts: knob)"
    )
    assert said in str(refused.value)


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        ({k: v for k, v in LAYER.items() if k != "revert"}, "host[0].revert: a reversible layer"),
        (LAYER | {"reversible": False}, "host[0].apply: an irreversible layer has none"),
        (LAYER | {"facts": {"knob": {}}}, "host[0].facts.knob: an expectation is needed"),
    ],
)  # fmt: skip
def test_bad_layers_are_refused_with_their_key(
    tmp_path: Path, layer: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_model(release_file(tmp_path, layer), Release)


def test_an_irreversible_layer_s_facts_replace_the_cluster_s_expectations() -> None:
    cluster = load_model(ROOT / "config/local.yaml", Cluster)
    fact = cluster.probes.facts[0]
    layer = HostLayer.model_validate(
        {"name": "new", "reversible": False, "facts": {fact.name: {"expect": "X"}}}
    )
    on = with_layers_on(cluster, [layer])
    changed = on.probes.facts[0]
    assert (changed.expect, changed.pattern, changed.argv) == ("X", None, fact.argv)
    assert on.probes.facts[1:] == cluster.probes.facts[1:]


def test_a_reversible_host_change_qualifies_with_alternating_arms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The candidate's arms run with the layer on, the previous release's with it off, in one
    session (C, P, C); the knob makes the hosts 10 % faster, and the gate says so."""
    inputs = load_inputs(release_file(tmp_path, LAYER), _cluster_file(tmp_path))
    transports = dict(_transports(inputs.cluster))
    alternating_session(inputs, transports, tmp_path, monkeypatch)


def knobs_over(transports: Mapping[str, Transport], cluster: Cluster) -> list[str]:
    """Every node's knob, read through its transport."""
    return [
        transports[node.name].run(["cat", f"{node.workdir}/knob"], check=True).stdout.strip()
        for node in cluster.nodes
    ]


def alternating_session(
    inputs: QualificationInputs,
    transports: Mapping[str, Transport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The benchmark gate through its real arm loop and the real layer switches on `inputs`'
    cluster; each arm's level follows the knobs the nodes hold while it runs."""
    cluster = inputs.cluster
    seen: dict[str, list[str]] = {}

    def run_arm(endpoint: object, suite: object, *, label: str, **_: object) -> ArmReport:
        del endpoint, suite
        seen[label] = knobs_over(transports, cluster)
        level = 1.10 if set(seen[label]) == {"1"} else 1.0
        return arm(label, tps=100 * level, ttft=0.2 / level)

    started = SimpleNamespace(wall_s=0.1, session=SimpleNamespace(build="b" * 64))
    monkeypatch.setattr(benchmark, "start_release", lambda *_a, **_k: started)
    monkeypatch.setattr(benchmark, "stop_session", lambda *_a, **_k: None)
    monkeypatch.setattr(benchmark, "run_arm", run_arm)
    context = GateContext(
        cluster=cluster, release=inputs.release, previous=inputs.previous,
        transports=dict(transports), state=tmp_path / "state",
        experiments=tmp_path / "experiments",
    )  # fmt: skip
    out = tmp_path / "out"
    settings = BenchmarkGate(suite=str(ROOT / "config/suites/release.yaml"), max_arms=5)
    saved: list[HostRecord] = []
    with host_layers_on(cluster, inputs.release.host, context.transports,
                        on_step=saved.append) as host:  # fmt: skip
        result = benchmark.run_benchmark(replace(context, host=host), settings, out)
    summary = result.summary_as(BenchmarkSummary)
    assert summary is not None, result.reason
    assert result.outcome.value == "passed", result.reason
    assert summary.arms == ["candidate", "previous", "candidate"]
    on, off = ["1"] * len(cluster.nodes), ["0"] * len(cluster.nodes)
    assert seen == {"1-candidate": on, "2-previous": off, "3-candidate": on}
    assert {row.verdict for row in summary.points if row.gated} == {"faster"}
    assert knobs_over(transports, cluster) == off  # left as found
    identity = json.loads((out / "arms" / "2-previous" / "arm.json").read_text())["identity"]
    assert identity["host_layers"] == "reverted"
    steps = [(s.action, s.arm) for s in saved[-1].steps]
    assert steps == [("revert", None), ("apply", None), ("apply", 1), ("revert", 2),
                     ("apply", 3), ("revert", None)]  # fmt: skip


def test_a_host_change_runs_its_release_tests_on_the_changed_hosts(tmp_path: Path) -> None:
    """Same build as r2, but the tests' run key covers the layers: r2's pass is not reused."""
    from flows.gates.release_tests.runner import _where  # noqa: PLC0415 - the key's part

    inputs = load_inputs(release_file(tmp_path, LAYER), _cluster_file(tmp_path))
    context = GateContext(
        cluster=inputs.cluster, release=inputs.release, previous=inputs.previous,
        transports={}, state=tmp_path / "state", experiments=tmp_path / "experiments",
    )  # fmt: skip
    head = inputs.cluster.head.name
    changed = _where(context, head)
    before = _where(replace(context, release=inputs.previous), head)
    assert changed["host"] == [layer.model_dump(mode="json") for layer in inputs.release.host]
    assert "host" not in before
    assert {k: v for k, v in changed.items() if k != "host"} == before


def test_the_plan_shows_each_node_s_layer_commands_after_distribute(tmp_path: Path) -> None:
    from flows.pipeline.plan import qualification_plan  # noqa: PLC0415 - the plan's one use

    inputs = load_inputs(release_file(tmp_path, LAYER), _cluster_file(tmp_path))
    plan = qualification_plan(inputs, tmp_path / "experiments")
    stages = list(dict.fromkeys(step.stage for step in plan.steps))
    assert stages.index("host") == stages.index("distribute") + 1
    [first, second] = [step for step in plan.steps if step.stage == "host"]
    assert (first.node, second.node) == ("local0", "local1")
    [layer] = second.detail["layers"]
    assert layer == {
        "name": "knob-on", "reversible": True, "facts": {"knob": {"at_least": 1}},
        "apply": f"sh -c 'echo 1 > {tmp_path}/local1/knob'",
        "revert": f"sh -c 'echo 0 > {tmp_path}/local1/knob'",
    }  # fmt: skip
    (tmp_path / "again").mkdir()
    r2 = load_inputs(tmp_path / "releases" / "r2.yaml", _cluster_file(tmp_path / "again"))
    assert "host" not in {step.stage for step in qualification_plan(r2, tmp_path).steps}
