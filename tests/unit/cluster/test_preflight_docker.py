"""Preflight of a docker-runtime cluster: the daemon of each node must answer with a version."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.cluster.lab.dockerd import DockerDaemon, start_dockerd, stop_dockerd
from flows.cluster.ops.preflight import run_preflight
from flows.cluster.transport import LocalTransport
from flows.spec.cluster import Cluster
from flows.spec.load import load_model

ENGINE = Path(__file__).resolve().parents[3] / "config" / "engines" / "sparkengine.yaml"


def docker_cluster(tmp_path: Path, daemon: str) -> Cluster:
    path = tmp_path / "c.yaml"
    path.write_text(
        f"""kind: cluster
name: dockerpf
shape: tp1-local
transport: {{kind: local}}
runtime: {{kind: docker, daemon: '{daemon}'}}
engine: {{extends: {ENGINE}}}
nodes: [{{name: a, rank: 0, head: true, address: 127.0.0.1, workdir: '{tmp_path}'}}]
"""
    )
    return load_model(path, Cluster)


def lines(cluster: Cluster) -> dict[str, tuple[str, str]]:
    report = run_preflight(cluster, lambda node: LocalTransport(node.name))
    return {r.check: (r.status, r.detail) for r in report.results}


def test_unreachable_daemon_is_an_error_naming_node_and_address(tmp_path: Path) -> None:
    socket = tmp_path / "none.sock"
    found = lines(docker_cluster(tmp_path, f"unix://{socket}"))
    status, detail = found["docker daemon"]
    assert status == "ERROR"
    assert detail.startswith("node a: ")
    assert str(socket) in detail
    assert "python version" not in found  # the interpreter lives in the image


@pytest.fixture
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerDaemon]:
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        pytest.skip("needs root and dockerd")
    state = Path("/tmp") / f"sg-pf-{os.getpid()}"  # short: unix socket paths are limited
    handle = start_dockerd("pf", state)
    try:
        yield handle
    finally:
        stop_dockerd(handle)
        shutil.rmtree(state, ignore_errors=True)


@pytest.mark.docker
def test_reachable_daemon_reports_its_version(tmp_path: Path, daemon: DockerDaemon) -> None:
    status, detail = lines(docker_cluster(tmp_path, daemon.base_url))["docker daemon"]
    assert status == "OK"
    assert detail.startswith("version ")
