"""Fault: a stopped (SIGSTOP) or killed run holds its cluster's Prefect concurrency slot, and
`sparkgate cluster unlock --force` left the slot taken: every other run on the cluster waited
(4 h by default) though the operator had just cleared the cluster. `unlock --force` now gives
the slot back too, on the configured server.
"""

from __future__ import annotations

import os
import signal
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
