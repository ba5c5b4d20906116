"""The scheduled deployment on a real local Prefect server with a process worker.

The session's server (fresh SQLite in a private PREFECT_HOME, analytics off) serves it. The test
creates the process pool, deploys both deployments of the shipped prefect.yaml with `prefect
deploy --all`, starts a worker, triggers a run of a trimmed r1 (only a small determinism gate) on
a private two-node cluster, and waits for it to complete with its published record. It also
shows the per-cluster concurrency limit at work: created on first use, released after the run,
and a run that cannot get it within its wait fails with LockHeldError. Server and worker always
end by process group; a failure prints both logs' tails.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.record import read_record, verify
from tests.support.overlays import SMALLEST_GATES, cluster_overlay, release_overlay
from tests.support.paths import ROOT
from tests.support.prefect_server import PREFECT, Server, spawn, stop
from tests.support.waiting import wait_until

# deploy and a qualification run on the session's server: minutes on a loaded two-core machine
pytestmark = [
    pytest.mark.integration, pytest.mark.slow, pytest.mark.prefect_server,
    pytest.mark.timeout(1800),
]  # fmt: skip

POOL = "sparkgate"  # the pool prefect.yaml names
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


@pytest.fixture
def server(prefect_api: Server) -> Server:
    """The session's server, under this module's name for it (runs told apart by cluster)."""
    return prefect_api


@pytest.fixture
def worker(server: Server, tmp_path: Path) -> Iterator[Path]:
    """A process worker on the pool, with SPARKGATE_ROOT in tmp (records land there)."""
    server.cli("work-pool", "create", POOL, "--type", "process", "--overwrite")
    env = {
        **server.env,
        "SPARKGATE_ROOT": str(tmp_path),
        "SPARKGATE_STATE_DIR": str(ROOT / ".sparkgate"),  # shared build cache, like other tests
    }
    argv = [PREFECT, "worker", "start", "--pool", POOL, "--limit", "1", "--name", "test-worker"]
    process = spawn(argv, env, server.logs / "worker.log")
    try:
        yield tmp_path
    finally:
        stop(process)


def _overlays(tmp: Path) -> tuple[Path, Path]:
    """A trimmed r1 (one small determinism gate) and a private two-node cluster."""
    release = release_overlay(
        tmp / "releases" / "r1.yaml", "releases/r1.yaml", gates=SMALLEST_GATES
    )
    cluster = cluster_overlay(
        tmp / "config" / "schedtest.yaml", "schedtest", tmp, nodes=("s0", "s1")
    )
    return release, cluster


def _wait_for_run(server: Server, run_id: str, timeout_s: float) -> dict[str, Any]:

    def ended() -> dict[str, Any] | None:
        run = server.get(f"/flow_runs/{run_id}")
        return dict(run) if (run.get("state") or {}).get("type") in TERMINAL else None

    return wait_until(ended, timeout_s, f"flow run {run_id} to end", interval_s=3,
                      detail=server.tails)  # fmt: skip


def test_the_nightly_deployment_runs_on_a_worker_and_publishes_its_record(
    server: Server, worker: Path
) -> None:
    release, cluster = _overlays(worker)
    server.cli("deploy", "--all", timeout_s=300)
    promote = server.get("/deployments/name/promotion/promote")
    assert set(promote["parameter_openapi_schema"]["required"]) == {"release", "by", "reason"}
    deployment = server.get("/deployments/name/nightly-qualification/nightly")
    assert deployment["parameters"]["release"] == "r2"
    assert [s["schedule"]["cron"] for s in deployment["schedules"]] == ["0 2 * * *"]

    path = f"/deployments/{deployment['id']}/create_flow_run"
    refused, why = server.post(path, {"parameters": {"release": "r2; rm -rf /"}})
    assert refused >= 400, f"an invalid release name was accepted: {why}"

    # parameters are names in the worker's project (SPARKGATE_ROOT), never paths
    assert (release.stem, cluster.stem) == ("r1", "schedtest")
    status, run = server.post(path, {"parameters": {"release": "r1", "cluster": "schedtest"}})
    assert status == 201, run
    finished = _wait_for_run(server, run["id"], timeout_s=1200)
    assert finished["state"]["type"] == "COMPLETED", (
        f"run ended {finished['state']}:\n{server.tails()}"
    )

    records = list((worker / "experiments").glob("*-r1"))
    assert len(records) == 1, f"records: {records}\n{server.tails()}"
    record = read_record(records[0])
    assert record.status == "published"
    assert record.cluster_name == "schedtest"
    assert record.stages["determinism"].outcome == "passed"
    assert verify(records[0]) == []
    slot = server.get("/v2/concurrency_limits/cluster:schedtest")
    assert slot["limit"] == 1
    assert slot["active_slots"] == 0, "the run did not give the cluster's slot back"


def _guard(server: Server, cluster: str, wait_s: float) -> subprocess.CompletedProcess[str]:
    code = (
        "from flows.pipeline.schedule import cluster_slot\n"
        f"with cluster_slot({cluster!r}, wait_s={wait_s}) as name:\n"
        "    print('held', name)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=server.env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


def test_a_run_that_cannot_get_the_cluster_slot_fails_with_lock_held(server: Server) -> None:
    server.cli("gcl", "create", "cluster:busy", "--limit", "1", "--active-slots", "1")
    blocked = _guard(server, "busy", wait_s=3)
    assert blocked.returncode != 0, blocked.stdout
    assert "LockHeldError" in blocked.stderr
    assert "'cluster:busy' stayed taken for 3 s" in blocked.stderr

    free = _guard(server, "idle", wait_s=60)
    assert free.returncode == 0, free.stderr
    assert "held cluster:idle" in free.stdout
    assert server.get("/v2/concurrency_limits/cluster:idle")["active_slots"] == 0
