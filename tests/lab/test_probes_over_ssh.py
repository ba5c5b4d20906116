"""Host probes over SSH, on the lab cluster file written by `lab up`: facts in preflight and a
sampler round on every host, and a host whose link is cut reads as an error, never a crash."""

from __future__ import annotations

import pytest

from flows.cluster.ops.preflight import node_values, run_preflight
from flows.cluster.probes.sampler import HostSampler
from flows.cluster.transport.factory import TransportPool
from flows.spec.probes import HostFact, HostSample, Limit, Probes
from tests.support.lab import Lab

pytestmark = pytest.mark.lab

PROBES = Probes(
    facts=[
        HostFact(name="page size", argv=["getconf", "PAGESIZE"], parse="number", at_least=4096),
        HostFact(name="kernel", argv=["uname", "-r"], expect="7.0.0-1019-nvidia-64k"),
    ],
    samples=[
        HostSample(name="cpu", argv=["cat", "/proc/stat"], parse="proc_stat"),
        HostSample(
            name="memory",
            argv=["cat", "/proc/meminfo"],
            parse="meminfo",
            limits=[Limit(value="MemAvailable", min=0.1)],
        ),
    ],
)


def test_facts_and_samples_over_ssh(lab: Lab) -> None:
    cluster = lab.cluster.model_copy(update={"probes": PROBES})
    with TransportPool(cluster) as pool:
        report = run_preflight(cluster, lambda node: pool.node(node.name))
        lines = {(r.node, r.check): (r.status, r.detail) for r in report.results}
        for host in lab.state.hosts:
            assert lines[host.name, "page size"][0] == "OK"
            status, detail = lines[host.name, "kernel"]  # not a Spark: the fact names both values
            assert status == "ERROR"
            assert detail.endswith(", expected '7.0.0-1019-nvidia-64k'")
        transports = {node.name: pool.node(node.name) for node in cluster.nodes}
        sampler = HostSampler(
            cluster, transports, lambda name: node_values(cluster, cluster.node(name))
        )
        sampler.round("cooldown")
        second = sampler.round("cooldown")
        for host in lab.state.hosts:
            cpu = next(r for r in second if r.node == host.name and r.probe == "cpu")
            assert isinstance(cpu.values["steal_pct"], float), cpu
            memory = next(r for r in second if r.node == host.name and r.probe == "memory")
            assert isinstance(memory.values["MemAvailable"], float), memory
    with lab.cut(1), TransportPool(cluster) as pool:
        transports = {node.name: pool.node(node.name) for node in cluster.nodes}
        sampler = HostSampler(
            cluster, transports, lambda name: node_values(cluster, cluster.node(name))
        )
        cut = lab.state.hosts[1].name
        readings = sampler.round("during")
    assert {r.probe for r in readings if r.node == cut and r.error} == {"cpu", "memory"}
    assert all(r.error is None for r in readings if r.node != cut)
