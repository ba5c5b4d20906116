"""Scale-out on a real database: one PostgreSQL-backed server, two workers, two clusters.

The test starts its own PostgreSQL (Debian's `postgresql`, a fresh cluster on a free loopback
port, tests/support/postgres.py), then `prefect server start` on it, creates the `sparkgate`
pool, deploys the shipped prefect.yaml and starts two process workers (`--limit 1` each) sharing
one project folder (SPARKGATE_ROOT). That project has two clusters: `local` (a private two-node
local cluster) and `lab` (two namespace hosts with sshd, reached over SSH). At once, a trimmed r1
is queued on each cluster (`prefect deployment run`) and a third is started on `lab` from a
terminal (`sparkgate qualify` with PREFECT_API_URL set), so the two workers take one run each and
the two `lab` runs meet at the slot `cluster:lab`. The test checks that the two `lab` runs never
held the cluster together although the second had started before the first ended (the slot, not
a lack of workers, kept it waiting), that the server showed both clusters' slots taken at the
same moment, and that every record verifies. Under CI=true a missing PostgreSQL or lab fails
(tests/conftest.py turns a lab test's skip into a failure).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flows.record import read_record
from flows.record.model import Record
from tests.support.lab import Lab
from tests.support.net import free_port
from tests.support.overlays import SMALLEST_GATES, cluster_overlay, overlay, release_overlay
from tests.support.paths import ROOT
from tests.support.postgres import Postgres, postgres_unavailable, private_postgres
from tests.support.prefect_server import PREFECT, Server, prefect_server, spawn, stop
from tests.support.waiting import wait_until

# a PostgreSQL cluster, a server, three qualifications on two clusters: minutes on two cores
# its own server, not the session's: the point is a server on PostgreSQL
pytestmark = [
    pytest.mark.lab, pytest.mark.integration, pytest.mark.slow, pytest.mark.prefect_server,
    pytest.mark.timeout(2400),
]  # fmt: skip

POOL = "sparkgate"
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
SPARKGATE = [sys.executable, "-m", "flows"]
RUN_ID = re.compile(r"UUID:\s*([0-9a-f-]{36})")


@pytest.fixture(scope="module")
def database() -> Iterator[Postgres]:
    """A private PostgreSQL for the module's server."""
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)  # a failure under CI=true (lab marker, tests/conftest.py)
    with private_postgres(free_port()) as started:
        yield started


@pytest.fixture
def server(database: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`prefect server start` on the private PostgreSQL."""
    folder = tmp_path_factory.mktemp("prefect-pg-server")
    with prefect_server(folder, free_port(), database_url=database.url) as started:
        yield started


def _project(root: Path, lab: Lab) -> None:
    """releases/r1.yaml (trimmed), config/local.yaml and config/lab.yaml (two hosts each)."""
    release_overlay(root / "releases" / "r1.yaml", "releases/r1.yaml", gates=SMALLEST_GATES)
    cluster_overlay(root / "config" / "local.yaml", "local", root / "local-nodes")
    assert lab.state.cluster_file is not None
    nodes = [node.model_dump(mode="json", exclude_defaults=True) for node in lab.cluster.nodes[:2]]
    overlay(root / "config" / "lab.yaml", lab.state.cluster_file,
            name="lab", shape="tp2-lab", nodes=nodes)  # fmt: skip


@dataclass
class Project:
    """The project every worker and terminal shares, and the environment they run in."""

    root: Path
    env: dict[str, str]


@pytest.fixture
def project(server: Server, lab: Lab, tmp_path: Path) -> Iterator[Project]:
    """The pool, the shipped deployments and two workers sharing the project in tmp."""
    root = tmp_path / "project"
    _project(root, lab)
    server.cli("work-pool", "create", POOL, "--type", "process")
    server.cli("deploy", "--all", timeout_s=300)
    env = {
        **server.env,
        "SPARKGATE_ROOT": str(root),
        "SPARKGATE_STATE_DIR": str(ROOT / ".sparkgate"),  # shared build cache, like other tests
        "COLUMNS": "200",
        # the terminal run's results: its own, not the checkout's (shared by every test session)
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(tmp_path / "results"),
    }
    argv = [PREFECT, "worker", "start", "--pool", POOL, "--limit", "1"]
    started = [spawn(argv, env, server.logs / f"worker-{i}.log") for i in (1, 2)]
    try:
        yield Project(root=root, env=env)
    finally:
        for process in started:
            stop(process)


def _queue(server: Server, cluster: str) -> str:
    """`prefect deployment run` of the nightly deployment for r1 on `cluster`; the run's id."""
    said = server.cli("deployment", "run", "nightly-qualification/nightly",
                      "-p", "release=r1", "-p", f"cluster={cluster}")  # fmt: skip
    found = RUN_ID.search(said)
    assert found, f"no run id in:\n{said}"
    return found.group(1)


def _ended(server: Server, ids: list[str], timeout_s: float) -> list[dict[str, Any]]:
    def all_ended() -> list[dict[str, Any]] | None:
        runs = [server.get(f"/flow_runs/{run_id}") for run_id in ids]
        done = all((run.get("state") or {}).get("type") in TERMINAL for run in runs)
        return runs if done else None

    return wait_until(all_ended, timeout_s, "the queued runs to end", interval_s=5,
                      detail=server.tails)  # fmt: skip


def _sparkgate(project: Project, *args: str) -> str:
    """`sparkgate ARGS` in the shared project; its output (asserts success)."""
    done = subprocess.run(
        [*SPARKGATE, *args], cwd=project.root, env=project.env, text=True,
        capture_output=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"sparkgate {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout + done.stderr


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _held(record: Record) -> tuple[datetime, datetime]:
    """From the record's opening to its publication: inside the time its run held the cluster."""
    assert record.published_at is not None, f"{record.name} is not published"
    return record.created_at, record.published_at


class SlotWatch:
    """Samples every `cluster:` slot on the server twice a second, in a thread of its own."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.samples: list[tuple[datetime, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            with suppress(OSError, ValueError):
                status, limits = self.server.post("/v2/concurrency_limits/filter", {})
                if status == 200:
                    taken = {
                        limit["name"]: int(limit["active_slots"])
                        for limit in limits
                        if str(limit["name"]).startswith("cluster:")
                    }
                    self.samples.append((datetime.now(UTC), taken))

    def __enter__(self) -> SlotWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def test_two_workers_two_clusters_one_run_per_cluster_on_postgres(
    server: Server, database: Postgres, project: Project
) -> None:
    assert server.get("/health") is True
    with SlotWatch(server) as watch:
        on_lab, on_local = _queue(server, "lab"), _queue(server, "local")
        at_terminal = datetime.now(UTC)
        terminal = spawn(
            [*SPARKGATE, "qualify", "releases/r1.yaml", "-c", "lab", "--no-wait"],
            project.env, server.logs / "terminal.log", cwd=project.root,
        )  # fmt: skip
        try:
            runs = _ended(server, [on_lab, on_local], timeout_s=2000)
            terminal.wait(timeout=600)
        finally:
            stop(terminal)
    for run in runs:
        assert run["state"]["type"] == "COMPLETED", (
            f"{run['name']} ended {run['state']}:\n{server.tails()}\n{database.tail()}"
        )
    assert terminal.returncode == 0, (
        f"sparkgate qualify exited {terminal.returncode}:\n{server.tails()}"
    )

    records = [read_record(path) for path in sorted((project.root / "experiments").glob("*-r1*"))]
    assert sorted(r.cluster_name for r in records) == ["lab", "lab", "local"], records
    listed = _sparkgate(project, "records")
    for record in records:
        assert record.status == "published"
        assert record.stages["determinism"].outcome == "passed"
        assert record.name in listed, listed
        _sparkgate(project, "verify", record.name)

    # one cluster: one run at a time, and the second had started before the first ended
    first, second = sorted((r for r in records if r.cluster_name == "lab"),
                           key=lambda r: r.created_at)  # fmt: skip
    first_held, second_held = _held(first), _held(second)
    timeline = "\n".join(
        f"{r.name} on {r.cluster_name}: {a:%H:%M:%S.%f} - {b:%H:%M:%S.%f}"
        for r, (a, b) in sorted(((r, _held(r)) for r in records), key=lambda item: item[1])
    )
    assert first_held[1] <= second_held[0], f"the lab runs overlapped:\n{timeline}"
    queued_lab = _when(next(run for run in runs if run["id"] == on_lab)["start_time"])
    assert max(queued_lab, at_terminal) < first_held[1], (
        f"the second lab run started ({max(queued_lab, at_terminal)}) only after the first "
        f"ended: the slot was never contended\n{timeline}"
    )
    # two clusters: the server saw both slots taken at the same moment
    both = [when for when, taken in watch.samples
            if taken.get("cluster:lab") == 1 and taken.get("cluster:local") == 1]  # fmt: skip
    assert both, f"cluster:lab and cluster:local were never held at once\n{timeline}"
    assert all(taken.get("cluster:lab", 0) <= 1 for _, taken in watch.samples)
    for cluster in ("lab", "local"):
        slot = server.get(f"/v2/concurrency_limits/cluster:{cluster}")
        assert (slot["limit"], slot["active_slots"]) == (1, 0), slot
    print(f"{timeline}\nboth slots held: {both[0]:%H:%M:%S} - {both[-1]:%H:%M:%S}",
          file=sys.stderr)  # fmt: skip
