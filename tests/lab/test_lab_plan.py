"""Lab naming, renderings and the root check: pure, so they run without root."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from flows.cluster.lab import hosts as lab
from flows.cluster.lab.hosts import LabHost, LabPlan, LabState, cluster_yaml_text, known_hosts_text
from flows.errors import ClusterError
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from tests.support.paths import ENGINE_FILE


def test_plan_names_fit_interface_limits() -> None:
    plan = LabPlan(prefix="sg-lab", nodes=16)
    names = [plan.bridge, *(plan.host_link(i) for i in range(16))]
    names += [plan.peer_link(i) for i in range(16)]
    assert max(len(name) for name in names) <= 15
    assert plan.address(0) == ipaddress.IPv4Address("198.18.0.10")
    assert plan.gateway == ipaddress.IPv4Address("198.18.0.1")
    with pytest.raises(ValueError, match="pattern"):
        LabPlan(prefix="x; rm -rf /")


def test_known_hosts_drop_comments() -> None:
    text = known_hosts_text([("198.18.0.10", "ssh-ed25519 AAAAkey sparkgate-lab-x\n")])
    assert text == "198.18.0.10 ssh-ed25519 AAAAkey\n"


def test_cluster_file_is_a_valid_cluster(tmp_path: Path) -> None:
    hosts = tuple(
        LabHost(
            name=f"sg-lab-{i}",
            namespace=f"sg-lab-{i}",
            address=f"198.18.0.1{i}",
            host_dir=str(tmp_path / str(i)),
            sshd_config="c",
        )
        for i in range(3)
    )
    state = LabState(
        prefix="sg-lab",
        subnet="198.18.0.0/24",
        lab_dir=str(tmp_path),
        hosts=hosts,
        client_key=str(tmp_path / "k"),
        known_hosts=str(tmp_path / "kh"),
    )
    path = tmp_path / "cluster.yaml"
    path.write_text(cluster_yaml_text(state, engine_file=ENGINE_FILE, python="/usr/bin/python3"))
    cluster = load_model(path, Cluster)
    assert cluster.shape == "tp3-lab"
    assert cluster.head.name == "sg-lab-0"
    assert [n.rank for n in cluster.nodes] == [0, 1, 2]
    assert len({n.workdir for n in cluster.nodes}) == 3
    assert cluster.transport.kind == "ssh"
    assert cluster.transport.accept_unknown_host_keys is False


def test_docker_cluster_file_points_at_each_daemon(tmp_path: Path) -> None:
    hosts = tuple(
        LabHost(
            name=f"sg-lab-{i}",
            namespace=f"sg-lab-{i}",
            address=f"198.18.0.1{i}",
            host_dir=str(tmp_path / str(i)),
            sshd_config="c",
        )
        for i in range(2)
    )
    state = LabState(
        prefix="sg-lab",
        subnet="198.18.0.0/24",
        lab_dir=str(tmp_path),
        hosts=hosts,
        client_key=str(tmp_path / "k"),
        known_hosts=str(tmp_path / "kh"),
    )
    sockets = [str(tmp_path / f"d{i}.sock") for i in range(2)]
    path = tmp_path / "cluster.yaml"
    text = cluster_yaml_text(state, engine_file=ENGINE_FILE, python="p", docker_sockets=sockets)
    path.write_text(text)
    cluster = load_model(path, Cluster)
    assert cluster.runtime.kind == "docker"
    assert [n.overrides.docker_daemon for n in cluster.nodes] == [f"unix://{s}" for s in sockets]


def test_recording_a_host_keeps_rank_order(tmp_path: Path) -> None:
    hosts = tuple(
        LabHost(name=f"h{i}", namespace=f"h{i}", address="a", host_dir="d", sshd_config="c")
        for i in range(3)
    )
    state = LabState(prefix="p", subnet="198.18.0.0/24", lab_dir="l", hosts=hosts)
    updated = state.with_host(hosts[0].model_copy(update={"sshd_pid": 7}))
    assert [h.name for h in updated.hosts] == ["h0", "h1", "h2"]
    assert updated.hosts[0].sshd_pid == 7
    added = state.with_host(
        LabHost(name="h3", namespace="h3", address="a", host_dir="d", sshd_config="c")
    )
    assert [h.name for h in added.hosts] == ["h0", "h1", "h2", "h3"]


def test_lab_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lab.os, "geteuid", lambda: 1000)
    with pytest.raises(ClusterError, match="lab hosts need root"):
        lab.require_root_and_tools()


def test_lab_needs_sshd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lab.os, "geteuid", lambda: 0)
    with pytest.raises(ClusterError, match="install openssh-server"):
        lab.require_root_and_tools(tmp_path / "no-sshd")
