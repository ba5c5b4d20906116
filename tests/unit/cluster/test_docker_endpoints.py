"""Which daemon each node's image goes to, and the CLI's refusal of non-docker clusters."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main
from flows.cluster.build.release_image import docker_endpoints
from flows.errors import SpecError
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release

ROOT = Path(__file__).resolve().parents[3]


def docker_cluster(tmp_path: Path) -> Path:
    path = tmp_path / "docker.yaml"
    path.write_text(
        f"""kind: cluster
extends: {ROOT / "config" / "local.yaml"}
set:
  name: dock
  runtime: {{kind: docker, daemon: "ssh://root@{{address}}"}}
  nodes:
    - {{name: n1, rank: 1, address: 10.0.0.2, workdir: /w}}
    - name: n0
      rank: 0
      head: true
      address: 10.0.0.1
      workdir: /w
      overrides: {{docker_daemon: "unix:///run/n0.sock"}}
"""
    )
    return path


def test_head_first_with_templates_and_overrides_filled(tmp_path: Path) -> None:
    cluster = load_model(docker_cluster(tmp_path), Cluster)
    release = load_model(ROOT / "releases" / "r1.yaml", Release)
    endpoints = docker_endpoints(cluster, release)
    assert [(e.node, e.base_url) for e in endpoints] == [
        ("n0", "unix:///run/n0.sock"),
        ("n1", "ssh://root@10.0.0.2"),
    ]


def test_a_process_cluster_has_no_daemons() -> None:
    cluster = load_model(ROOT / "config" / "local.yaml", Cluster)
    release = load_model(ROOT / "releases" / "r1.yaml", Release)
    with pytest.raises(SpecError, match=r"runtime.kind: .*not in Docker \(expected docker\)"):
        docker_endpoints(cluster, release)


def test_cli_refuses_a_process_cluster_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["image", "build", str(ROOT / "releases" / "r1.yaml"), "--cluster", "local"])
    assert code == 2
    assert "runtime.kind" in capsys.readouterr().err
