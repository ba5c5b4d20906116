"""TP3 over SSH: the real engine boots across three namespace hosts, and a crash is named.

The ranks run as processes on the lab hosts, started and watched through paramiko exactly like
on GB10 nodes; the pipeline reaches the head's API on its lab address.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.cluster.boot.session import ensure_models
from flows.cluster.boot.watch import boot, stop_all
from flows.cluster.runtime.process import ProcessRuntime
from flows.cluster.transport.factory import TransportPool
from flows.errors import BootError
from flows.spec.launch import LaunchPlan, render_all
from flows.spec.load import load_model
from flows.spec.release import Release
from tests.support.lab import Lab
from tests.support.paths import ROOT

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.integration]


@pytest.fixture
def pool(lab: Lab) -> Iterator[TransportPool]:
    """SSH transports to the three lab hosts."""
    with TransportPool(lab.cluster) as transports:
        yield transports


def _plans(lab: Lab, **env: str) -> list[LaunchPlan]:
    release = load_model(ROOT / "releases/r1.yaml", Release)
    plans = render_all(lab.cluster, release)
    return [plan.model_copy(update={"env": {**plan.env, **env}}) for plan in plans]


def test_tp3_boots_over_ssh_serves_and_stops(lab: Lab, pool: TransportPool, tmp_path: Path) -> None:
    transports = {node.name: pool.node(node.name) for node in lab.cluster.nodes}
    plans = _plans(lab)
    for plan in plans:
        transports[plan.node].run(["mkdir", "-p", "--", plan.workdir], check=True)
    ensure_models(plans, transports)
    runtime = ProcessRuntime(dict(transports))
    result = boot(lab.cluster.engine, plans, runtime, transports, evidence_root=tmp_path)
    try:
        assert [rank.rank for rank in result.timeline.ranks] == [0, 1, 2]
        assert all(rank.kernels for rank in result.timeline.ranks)
        head = next(plan for plan in plans if plan.head)
        assert head.ready_url is not None
        base = head.ready_url.removesuffix("/health")
        body = json.dumps({"model": "sparkengine", "prompt": "Hello", "max_tokens": 4}).encode()
        request = urllib.request.Request(
            base + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.load(response)
        assert answer["usage"]["completion_tokens"] == 4
    finally:
        stop_all(runtime, result.handles)
    assert not any(runtime.status(handle).running for handle in result.handles)


def test_a_rank_killed_mid_boot_is_named_with_every_node_s_evidence(
    lab: Lab, pool: TransportPool, tmp_path: Path
) -> None:
    transports = {node.name: pool.node(node.name) for node in lab.cluster.nodes}
    plans = _plans(lab, SPARKENGINE_FAULT_CRASH="2@prepare")
    ensure_models(plans, transports)
    runtime = ProcessRuntime(dict(transports))
    with pytest.raises(BootError) as failure:
        boot(lab.cluster.engine, plans, runtime, transports, evidence_root=tmp_path)
    victim = next(plan for plan in plans if plan.rank == 2)
    assert f"node {victim.node} rank 2" in str(failure.value)
    evidence = failure.value.evidence
    assert evidence is not None
    assert len(list(evidence.glob("*.log"))) == 3
    assert len(list(evidence.glob("*.inspect.json"))) == 3
    for inspect in evidence.glob("*.inspect.json"):
        pid = json.loads(inspect.read_text())["pid"]
        node = inspect.name.split("-rank")[0]
        assert not transports[node].is_alive(pid)
