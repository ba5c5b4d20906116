"""`sparkgate cluster start|status|logs|stop` as a user runs them, on the real engine."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.cli import main
from flows.cluster.ops.lock import ClusterLock, lock_settings
from flows.cluster.transport.local import LocalTransport
from flows.spec.cluster import Cluster
from flows.spec.load import load_model

from .conftest import ROOT, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def cluster_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """config/local.yaml overlaid with private workdirs and free ports; state under tmp."""
    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path))
    overlay = {
        "extends": str(ROOT / "config/local.yaml"),
        "set": {
            "name": "clitest",
            "ports": {"rendezvous": free_port(), "api": free_port()},
            "nodes": [
                {
                    "name": "n0",
                    "rank": 0,
                    "head": True,
                    "address": "127.0.0.1",
                    "workdir": str(tmp_path / "n0"),
                },
                {"name": "n1", "rank": 1, "address": "127.0.0.1", "workdir": str(tmp_path / "n1")},
            ],
        },
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(overlay))
    return path


def test_start_status_logs_stop(cluster_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    release = str(ROOT / "releases/r1.yaml")
    assert main(["cluster", "start", release, "-c", str(cluster_file)]) == 0
    try:
        err = capsys.readouterr().err
        assert "boot timeline" in err
        assert "clitest serves r1" in err
        assert main(["cluster", "start", release, "-c", str(cluster_file)]) == 1
        assert "already runs r1" in capsys.readouterr().err
        assert main(["cluster", "status", "-c", str(cluster_file), "--json"]) == 0
        status = capsys.readouterr().out
        assert status.count('"running"') == 2
        assert main(["cluster", "logs", "-c", str(cluster_file), "--node", "n1"]) == 0
        assert '"event":"rendezvous"' in capsys.readouterr().out.replace(" ", "")
    finally:
        assert main(["cluster", "stop", "-c", str(cluster_file)]) == 0
    err = capsys.readouterr().err
    assert "n0 rank 0: exited" in err
    assert "n1 rank 1: exited" in err
    assert main(["cluster", "status", "-c", str(cluster_file)]) == 0
    assert "nothing started by sparkgate is running" in capsys.readouterr().err


def test_start_refuses_while_the_lock_is_held_and_names_the_holder(
    cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = load_model(cluster_file, Cluster)
    head = LocalTransport(spec.head.name)
    holder = ClusterLock(head, lock_settings(spec), command="sparkgate qualify releases/r2.yaml")
    holder.acquire()
    try:
        code = main(["cluster", "start", str(ROOT / "releases/r1.yaml"), "-c", str(cluster_file)])
    finally:
        holder.release()
    assert code == 1
    message = capsys.readouterr().err
    assert "locked by" in message
    assert "sparkgate qualify releases/r2.yaml" in message
