"""The scheduled deployment on a real local Prefect server with a process worker.

One server (fresh SQLite in a private PREFECT_HOME, analytics off) serves the module. The test
creates the process pool, deploys both deployments of the shipped prefect.yaml with `prefect
deploy --all`, starts a worker, triggers a run of a trimmed r1 (only a small determinism gate) on
a private two-node cluster, and waits for it to complete with its published record. It also
shows the per-cluster concurrency limit at work: created on first use, released after the run,
and a run that cannot get it within its wait fails with LockHeldError. Server and worker always
end by process group; a failure prints both logs' tails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.record import read_record, verify

from .conftest import ROOT, free_port

# a fresh server, deploy and a qualification run: minutes on a loaded two-core machine
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

PREFECT = str(Path(sys.executable).parent / "prefect")
POOL = "sparkgate"  # the pool prefect.yaml names
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


@dataclass
class Server:
    """A running server: its API URL, the environment clients need, and the logs to show."""

    api: str
    env: dict[str, str]
    logs: Path

    def tails(self) -> str:
        parts = []
        for log in sorted(self.logs.glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-60:]
            parts.append(f"--- {log.name} (last {len(lines)} lines) ---\n" + "\n".join(lines))
        return "\n".join(parts)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.api}{path}", timeout=30) as response:
            return json.loads(response.read())

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        request = urllib.request.Request(
            f"{self.api}{path}", data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")

    def cli(self, *args: str, timeout_s: float = 240, **env: str) -> str:
        done = subprocess.run(
            [PREFECT, "--no-prompt", *args], env={**self.env, **env}, cwd=ROOT,
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"prefect {' '.join(args)} failed:\n{output}\n{self.tails()}"
        return output


def _clean_env(home: Path, api: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return {
        **env,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_UI_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "2",
        "PREFECT_LOGGING_LEVEL": "INFO",
    }


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGINT, then SIGTERM, then SIGKILL to the whole process group."""
    for sig, grace in ((signal.SIGINT, 20), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        if process.poll() is not None:
            break
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
    with suppress(ProcessLookupError):  # children left in the group (a flow run) go too
        os.killpg(process.pid, signal.SIGKILL)


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`prefect server start` on a free loopback port with a fresh private database."""
    root = tmp_path_factory.mktemp("prefect-server")
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = _clean_env(root / "home", api)
    started = Server(api=api, env=env, logs=root)
    argv = [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"]
    process = _spawn(argv, env, root / "server.log")
    try:
        deadline = time.monotonic() + 300
        while True:
            assert process.poll() is None, f"the server exited:\n{started.tails()}"
            try:
                if started.get("/health") is True:
                    break
            except (OSError, ValueError):
                pass
            assert time.monotonic() < deadline, f"no /api/health in 300 s:\n{started.tails()}"
            time.sleep(1)
        yield started
    finally:
        _stop(process)


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
    process = _spawn(argv, env, server.logs / "worker.log")
    try:
        yield tmp_path
    finally:
        _stop(process)


def _overlays(tmp: Path) -> tuple[Path, Path]:
    """A trimmed r1 (one small determinism gate) and a private two-node cluster."""
    release = tmp / "releases" / "r1.yaml"
    release.parent.mkdir(parents=True)
    release.write_text(yaml.safe_dump({
        "extends": str(ROOT / "releases/r1.yaml"),
        "set": {"gates": {
            "release_tests": {"enabled": False},
            "determinism": {"prompts": ["The quick brown fox"], "max_tokens": 4,
                            "long_prompt_tokens": 64, "sampled_streams": 1, "stagger_ms": 10},
            "cold_boots": {"enabled": False},
            "benchmark": {"enabled": False},
        }},
    }))  # fmt: skip
    cluster = tmp / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({
        "extends": str(ROOT / "config/local.yaml"),
        "set": {
            "name": "schedtest",
            "ports": {"rendezvous": free_port(), "api": free_port()},
            "nodes": [
                {"name": "s0", "rank": 0, "head": True, "address": "127.0.0.1",
                 "workdir": str(tmp / "s0")},
                {"name": "s1", "rank": 1, "address": "127.0.0.1", "workdir": str(tmp / "s1")},
            ],
        },
    }))  # fmt: skip
    return release, cluster


def _wait_for_run(server: Server, run_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        run = server.get(f"/flow_runs/{run_id}")
        state = (run.get("state") or {}).get("type")
        if state in TERMINAL:
            return dict(run)
        assert time.monotonic() < deadline, (
            f"flow run still {state} after {timeout_s} s:\n{server.tails()}"
        )
        time.sleep(3)


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

    status, run = server.post(
        path, {"parameters": {"release": str(release), "cluster": str(cluster)}}
    )
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
        "from flows.schedule import cluster_slot\n"
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
