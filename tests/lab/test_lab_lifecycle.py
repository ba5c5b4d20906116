"""`lab up` / `lab down`: exactly what is recorded is created and removed, crashes included."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from pathlib import Path

import pytest

from flows.cluster.lab.hosts import LabPlan, LabState, lab_down, lab_up, read_state
from flows.errors import ClusterError
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from tests.support.lab import lab_unavailable
from tests.support.paths import ENGINE_FILE

pytestmark = pytest.mark.lab

PLAN = LabPlan(prefix="sg-u", nodes=2, subnet=ipaddress.IPv4Network("198.18.2.0/24"))


@pytest.fixture
def lab_dir(tmp_path: Path) -> Path:
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    return tmp_path / "lab"


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}


def links() -> set[str]:
    listed = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    return {line.split(": ")[1].split("@")[0] for line in listed.stdout.splitlines()}


def live(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def made_by(state: LabState) -> tuple[set[str], set[str], list[int]]:
    pids = [host.sshd_pid for host in state.hosts if host.sshd_pid is not None]
    return set(state.namespaces), {*state.links, state.bridge or ""}, pids


def up(lab_dir: Path) -> LabState:
    return lab_up(PLAN, lab_dir, engine_file=ENGINE_FILE, python=sys.executable)


def test_up_then_down_leaves_nothing(lab_dir: Path) -> None:
    state = up(lab_dir)
    try:
        spaces, our_links, pids = made_by(state)
        assert spaces == {"sg-u-0", "sg-u-1"}
        assert our_links == {"sg-u-h0", "sg-u-h1", "sg-u-br"}
        assert spaces <= namespaces()
        assert our_links <= links()
        assert len(pids) == 2
        assert all(live(pid) for pid in pids)
        assert state.cluster_file is not None
        cluster = load_model(state.cluster_file, Cluster)
        assert [node.address for node in cluster.nodes] == ["198.18.2.10", "198.18.2.11"]
        assert cluster.transport.kind == "ssh"
    finally:
        removed = lab_down(lab_dir)
    assert removed is not None
    assert read_state(lab_dir) is None
    assert not spaces & namespaces()
    assert not our_links & links()
    assert not any(live(pid) for pid in pids)
    assert sorted(p.name for p in lab_dir.iterdir()) == []
    assert lab_down(lab_dir) is None  # idempotent


def test_leftovers_of_a_crashed_run_are_cleaned_first(lab_dir: Path) -> None:
    crashed = up(lab_dir)  # never taken down: as if the process died
    old_pids = made_by(crashed)[2]
    subprocess.run(["ip", "netns", "del", "sg-u-1"], check=True)  # and partly gone already
    fresh = up(lab_dir)
    try:
        assert not any(live(pid) for pid in old_pids)
        assert set(fresh.namespaces) <= namespaces()
    finally:
        lab_down(lab_dir)
    assert not {"sg-u-0", "sg-u-1"} & namespaces()


def test_sessions_started_over_ssh_are_stopped_by_down(lab_dir: Path) -> None:
    from flows.cluster.transport.factory import transport_for  # noqa: PLC0415

    state = up(lab_dir)
    try:
        assert state.cluster_file is not None
        cluster = load_model(state.cluster_file, Cluster)
        transport = transport_for(cluster, cluster.nodes[0])
        pid = transport.start(["sleep", "300"], stdout_path=str(lab_dir / "sleep.log"))
        assert transport.is_alive(pid)
        transport.close()
    finally:
        lab_down(lab_dir)
    assert not live(pid)


def test_overlapping_subnet_is_refused(lab_dir: Path) -> None:
    state = up(lab_dir)
    try:
        other = LabPlan(prefix="sg-v", nodes=1, subnet=PLAN.subnet)
        with pytest.raises(ClusterError, match="already routed"):
            lab_up(other, lab_dir.parent / "other", engine_file=ENGINE_FILE, python="python3")
        assert set(state.namespaces) <= namespaces()
    finally:
        lab_down(lab_dir)


def test_failure_half_way_rolls_everything_back(
    lab_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.cluster.lab import dockerd  # noqa: PLC0415

    def broken(name: str, state_dir: Path, netns: str | None = None) -> dockerd.DockerDaemon:
        raise ClusterError(f"dockerd {name} failed to start")

    monkeypatch.setattr(dockerd, "start_dockerd", broken)
    before = namespaces()
    plan = PLAN.model_copy(update={"docker": True})
    with pytest.raises(ClusterError, match="dockerd sg-u-0 failed to start"):
        lab_up(plan, lab_dir, engine_file=ENGINE_FILE, python=sys.executable)
    assert namespaces() == before
    assert not {"sg-u-h0", "sg-u-h1", "sg-u-br"} & links()
    assert read_state(lab_dir) is None
    survivors = subprocess.run(
        ["pgrep", "-f", str(lab_dir)], capture_output=True, text=True, check=False
    ).stdout.split()
    assert not [pid for pid in survivors if live(int(pid))]
