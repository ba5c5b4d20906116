"""Fault: a stopped (SIGSTOP) or killed run holds its cluster's Prefect concurrency slot, and
`sparkgate cluster unlock --force` left the slot taken: every other run on the cluster waited
(4 h by default) though the operator had just cleared the cluster. `unlock --force` now gives
the slot back too, on the configured server.

The holder was known only by its lease's age (issue 30, med: "A SIGKILLed qualify holds the
cluster's concurrency slot ... a stopped (SIGSTOP) holder blocks others"): nobody could say which
process held the cluster, and a run on the same host waited out a dead holder's lease. Now the
holder records its pid, host and run with the slot: the refusal and `cluster status` name it (and
say it is stopped), and a dead holder on this host has its lease given back at once.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.overlays import cluster_overlay
from tests.support.prefect_server import Server

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.prefect_server,
    pytest.mark.timeout(900),
]

HOLDER = Path(__file__).with_name("slot_holder.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server(prefect_api: Server) -> Server:
    """The session's Prefect server (the slot is named after this test's own cluster)."""
    return prefect_api


def _env(server: Server, root: Path) -> dict[str, str]:
    return server.env | {
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'engine'}",
        "SPARKGATE_ROOT": str(root),
        "SPARKGATE_STATE_DIR": str(root / "state"),
    }


def _take(cluster: str, env: dict[str, str], wait_s: float) -> subprocess.CompletedProcess[str]:
    code = (
        "from flows.settings import prefect_environment; prefect_environment()\n"
        "from flows.pipeline.schedule import cluster_slot\n"
        f"with cluster_slot({cluster!r}, wait_s={wait_s}) as name:\n"
        "    print('held', name)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip


def test_unlock_force_gives_back_the_slot_of_a_stopped_holder(
    server: Server, tmp_path: Path
) -> None:
    cluster = cluster_overlay(tmp_path / "cluster.yaml", "slotted", tmp_path)
    env = _env(server, tmp_path)
    ready = tmp_path / "ready"
    holder = subprocess.Popen(
        [sys.executable, str(HOLDER), "slotted", str(ready)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert holder.poll() is None, holder.communicate()
            assert time.monotonic() < deadline, "the holder never got the slot"
            time.sleep(0.2)
        holder.send_signal(signal.SIGSTOP)  # stopped: alive, renewing nothing, holding the slot
        assert server.get("/v2/concurrency_limits/cluster:slotted")["active_slots"] == 1
        unlock = subprocess.run(
            [sys.executable, "-m", "flows", "cluster", "unlock", "-c", str(cluster), "--force"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert unlock.returncode == 0, unlock.stdout + unlock.stderr
        assert "gave back 1 taken slot of 'cluster:slotted'" in unlock.stderr, unlock.stderr
        taken = server.get("/v2/concurrency_limits/cluster:slotted")["active_slots"]
        assert taken == 0, "unlock --force left the cluster's slot taken"
        after = _take("slotted", env, wait_s=10)
        assert after.returncode == 0, f"the next run still waits for the slot: {after.stderr}"
        assert "held cluster:slotted" in after.stdout
    finally:
        holder.kill()
        holder.communicate()


# -- the holder recorded with the slot (before: a run id at most, and only its lease's age) ------


def _hold(cluster: str, env: dict[str, str], ready: Path) -> subprocess.Popen[bytes]:
    """A process holding the cluster's slot (slot_holder.py), once it holds it."""
    holder = subprocess.Popen(
        [sys.executable, str(HOLDER), cluster, str(ready)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert holder.poll() is None, holder.communicate()
        assert time.monotonic() < deadline, "the holder never got the slot"
        time.sleep(0.2)
    return holder


def test_a_killed_holder_s_slot_is_taken_at_once_by_a_run_on_its_host(
    server: Server, tmp_path: Path
) -> None:
    env = _env(server, tmp_path)
    holder = _hold("killed", env, tmp_path / "ready")
    holder.kill()  # SIGKILL: no release, its lease runs on for LEASE_S (60 s)
    holder.communicate()
    began = time.monotonic()
    after = _take("killed", env, wait_s=30)
    waited = time.monotonic() - began
    assert after.returncode == 0, f"the slot of a dead holder was not given back: {after.stderr}"
    assert "held cluster:killed" in after.stdout
    assert f"holder is gone (pid {holder.pid} on {socket.gethostname()}" in after.stderr
    assert waited < 20, f"took {waited:.0f} s: the dead holder was recognised only by its age"


def test_the_refusal_and_cluster_status_name_a_stopped_holder(
    server: Server, tmp_path: Path
) -> None:
    cluster = cluster_overlay(tmp_path / "cluster.yaml", "stopped", tmp_path)
    env = _env(server, tmp_path)
    holder = _hold("stopped", env, tmp_path / "ready")
    try:
        holder.send_signal(signal.SIGSTOP)
        blocked = _take("stopped", env, wait_s=3)
        assert blocked.returncode != 0, blocked.stdout
        named = f"held by pid {holder.pid} on {socket.gethostname()}"
        assert "LockHeldError" in blocked.stderr
        assert named in blocked.stderr, blocked.stderr
        assert "(stopped)" in blocked.stderr
        status = subprocess.run(
            [sys.executable, "-m", "flows", "cluster", "status", "-c", str(cluster)],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert status.returncode == 0, status.stderr
        shown = " ".join(status.stderr.split())  # rich wraps long lines
        assert f"'cluster:stopped' is {named}" in shown, status.stderr
        assert "(stopped)" in shown
    finally:
        holder.kill()
        holder.communicate()
