"""`lab up --docker`: one private dockerd per namespace host, reachable from this machine."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from flows.cluster.lab.hosts import LabPlan, lab_down, lab_up
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from tests.support.lab import lab_unavailable
from tests.support.paths import ENGINE_FILE, ROOT

pytestmark = [pytest.mark.lab, pytest.mark.docker, pytest.mark.slow]

PLAN = LabPlan(prefix="sg-w", nodes=2, subnet=ipaddress.IPv4Network("198.18.4.0/24"), docker=True)


def test_lab_with_one_dockerd_per_host() -> None:
    reason = lab_unavailable() or (None if shutil.which("dockerd") else "needs dockerd")
    if reason:
        pytest.skip(reason)
    lab_dir = ROOT / ".sparkgate" / "test-lab-docker"  # short: unix socket paths are limited
    try:
        state = lab_up(PLAN, lab_dir, engine_file=ENGINE_FILE, python=sys.executable)
        assert state.cluster_file is not None
        cluster = load_model(state.cluster_file, Cluster)
        assert cluster.runtime.kind == "docker"
        pids = []
        for node, host in zip(cluster.nodes, state.hosts, strict=True):
            assert host.dockerd is not None
            assert node.overrides.docker_daemon == f"unix://{host.dockerd['socket']}"
            client = docker.DockerClient(base_url=node.overrides.docker_daemon)
            try:
                assert client.version()["Version"]
            finally:
                client.close()
            pids.append(int(str(host.dockerd["pid"])))
            in_namespace = Path(f"/proc/{host.dockerd['pid']}/ns/net").stat().st_ino
            assert in_namespace == Path(f"/run/netns/{host.namespace}").stat().st_ino
    finally:
        lab_down(lab_dir)
    assert not (lab_dir / "docker").exists()
    left = subprocess.run(
        ["pgrep", "-f", str(lab_dir)], capture_output=True, text=True, check=False
    )
    assert left.stdout.strip() == "" or all(
        Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        for pid in left.stdout.split()
    )
