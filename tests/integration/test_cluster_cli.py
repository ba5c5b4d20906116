"""`sparkgate cluster start|status|logs|stop` as a user runs them, on the real engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main
from flows.cluster.ops.lock import ClusterLock, lock_settings
from flows.cluster.transport.local import LocalTransport
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from tests.support.overlays import cluster_overlay
from tests.support.paths import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def cluster_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """config/local.yaml overlaid with private workdirs and free ports; state under tmp."""
    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path))
    return cluster_overlay(tmp_path / "cluster.yaml", "clitest", tmp_path, nodes=("n0", "n1"))


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
