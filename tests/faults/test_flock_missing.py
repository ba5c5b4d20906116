"""Fault: `flock` missing on the head node, which holds the cluster lock.

Every change of the lock (heartbeat, takeover, release, forced unlock) is a compare-and-swap under
`flock` on the head, so without it a run took the lock (`ln` needs no flock), then failed every
heartbeat and could not release it. Now preflight (`sparkgate doctor`) names the missing tool on
the head node, and taking the lock refuses before anything is written.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from flows.cluster.ops.lock import ClusterLock, LockSettings
from flows.cluster.ops.preflight import run_preflight
from flows.cluster.transport import LocalTransport
from flows.errors import ClusterError
from flows.spec.cluster import Cluster
from flows.spec.load import load_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_flock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding every program of this machine's PATH except `flock` (a node without
    util-linux's flock)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        if not Path(folder).is_dir():
            continue
        for program in Path(folder).iterdir():
            link = bin_dir / program.name
            if program.name != "flock" and not link.exists() and os.access(program, os.X_OK):
                link.symlink_to(program)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert shutil.which("flock") is None
    return bin_dir


def _cluster(tmp_path: Path) -> Cluster:
    cluster = load_model(ROOT / "config/local.yaml", Cluster)
    nodes = [
        node.model_copy(update={"workdir": str(tmp_path / "nodes" / node.name)})
        for node in cluster.nodes
    ]
    return cluster.model_copy(update={"nodes": nodes})


def test_flock_missing_on_the_head_fails_preflight(tmp_path: Path, no_flock: Path) -> None:
    del no_flock
    cluster = _cluster(tmp_path)
    report = run_preflight(cluster, lambda node: LocalTransport(node.name))
    flock = [r for r in report.results if r.check == "flock"]
    assert [(r.node, r.status) for r in flock] == [(cluster.head.name, "ERROR")]
    assert "flock is missing" in flock[0].detail
    assert "cluster lock" in flock[0].detail
    with pytest.raises(ClusterError, match="flock"):
        report.raise_for_errors()


def test_flock_missing_refuses_the_lock_before_writing_it(tmp_path: Path, no_flock: Path) -> None:
    del no_flock
    path = tmp_path / "head" / "sparkgate.lock"
    lock = ClusterLock(LocalTransport("local0"), LockSettings(path=str(path)), command="test")
    with pytest.raises(ClusterError, match="local0: flock is missing"):
        lock.acquire()
    assert not path.exists()
    assert lock.record is None
