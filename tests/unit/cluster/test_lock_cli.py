"""`sparkgate cluster unlock`: shows the holder, removes only with --force."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main
from flows.cluster.ops.lock import ClusterLock, lock_settings, read_lock
from flows.cluster.transport import LocalTransport
from flows.commands.cluster import load_cluster

ENGINE = Path(__file__).resolve().parents[3] / "config" / "engines" / "sparkengine.yaml"


def cluster_file(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(
        f"""kind: cluster
name: unlocktest
shape: tp1-local
transport: {{kind: local}}
runtime: {{kind: process}}
engine: {{extends: {ENGINE}}}
nodes: [{{name: a, rank: 0, head: true, address: 127.0.0.1, workdir: '{tmp_path / "w"}'}}]
"""
    )
    return path


def test_unlock_needs_force_and_names_the_holder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = cluster_file(tmp_path)
    cluster = load_cluster(str(path))
    settings = lock_settings(cluster)
    assert settings.path == f"{tmp_path / 'w'}.sparkgate/sparkgate.lock"  # beside the workdir
    holder = ClusterLock(LocalTransport("a"), settings, command="sparkgate qualify r9")
    holder.acquire()
    holder._stop.set()
    assert main(["cluster", "unlock", "--cluster", str(path)]) == 1
    assert "qualify r9" in capsys.readouterr().err
    assert read_lock(LocalTransport("a"), settings.path) is not None
    assert main(["cluster", "unlock", "--cluster", str(path), "--force"]) == 0
    assert "removed the lock" in capsys.readouterr().err
    assert read_lock(LocalTransport("a"), settings.path) is None
    assert main(["cluster", "unlock", "--cluster", str(path), "--force"]) == 0
    assert "not locked" in capsys.readouterr().err


def test_unknown_cluster_is_a_spec_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "unlock", "--cluster", "no-such-cluster"]) == 2
    assert "no cluster 'no-such-cluster'" in capsys.readouterr().err
