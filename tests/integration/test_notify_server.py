"""A qualification that pauses or fails is announced: a real server's automation posts to a
local webhook, with a one-line message and the run's UI link.

`sparkgate notify URL --allow-private` against the session's `prefect server start`; then the
real `sparkgate qualify`, run from a terminal with PREFECT_API_URL set, on a private two-node
cluster: a trimmed r1 that pauses for a decision nobody gives within 5 s (announced Paused with
the verdict and the commands that decide, then Failed), and crash-on-boot, which fails at its
first boot. The nightly deployment's flow fails on a release name that loads no spec. A nightly
deployment run served by a process worker (`prefect deploy --all`, `wait: true`) pauses and
expires like the terminal's, and the nightly run itself ends Failed with the same one line. The
server's triggers see each event and its actions post the rendered body to the receiver here,
naming the run, the release, the state and the verdict, with the run's URL. How a benchmark
headline joins the message is rendered with the server's own template in
tests/unit/flow/test_notify_payload.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.overlays import SMALLEST_GATES, cluster_overlay, overlay, release_overlay
from tests.support.paths import ROOT
from tests.support.prefect_server import PREFECT, Server, spawn, stop
from tests.support.project import (
    TRIMMED_DETERMINISM,
    TRIMMED_GATES,
    ProjectKind,
    PromotionProject,
    projects,
)
from tests.support.waiting import wait_until
from tests.support.webhook import Receiver

pytestmark = [
    pytest.mark.integration, pytest.mark.slow, pytest.mark.prefect_server,
    pytest.mark.timeout(900),
]  # fmt: skip

CLUSTER = "notifytest"
WAIT_S = 5  # promotion.timeout_s of the release that pauses: nobody decides
IN_A_TERMINAL = projects(ProjectKind(CLUSTER, PromotionProject, server=True))

NIGHTLY_WITH_A_BAD_RELEASE = """
from flows.pipeline.deployments import nightly_qualification

nightly_qualification(release="nosuch", return_state=True)
"""


@pytest.fixture
def receiver(prefect_api: Server) -> Iterator[Receiver]:
    """A receiver that `sparkgate notify` made the session's server post to."""
    with Receiver() as running:
        notify = subprocess.run(
            [sys.executable, "-m", "flows", "notify", running.url, "--allow-private"],
            env=prefect_api.env, cwd=ROOT, capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip
        assert notify.returncode == 0, notify.stdout + notify.stderr + prefect_api.tails()
        assert "posts to" in notify.stderr
        yield running


def _posted(
    server: Server, receiver: Receiver, release: str, state: str, says: str = ""
) -> dict[str, Any]:
    """The body posted for `release`'s run entering `state`, its message starting with `says`
    (waits up to 2 min)."""
    return wait_until(
        lambda: receiver.posted(release, state, says), 120,
        f"the webhook post for {release} {state} saying {says!r}",
        interval_s=1, detail=lambda: f"{receiver.bodies}\n{server.tails()}",
    )  # fmt: skip


def _a_run_link(server: Server, body: dict[str, Any]) -> None:
    url = body["url"]
    assert isinstance(url, str), body
    assert url.startswith(f"{server.ui}/runs/flow-run/"), body


def _one_line(body: dict[str, Any]) -> str:
    message = body["message"]
    assert isinstance(message, str), body
    assert message, body
    assert "\n" not in message, body
    return message


@IN_A_TERMINAL
def test_a_qualification_that_fails_posts_its_verdict_and_url(
    prefect_api: Server, receiver: Receiver, project: PromotionProject
) -> None:
    overlay(project.root / "alone/r1.yaml", "releases/r1.yaml")  # its previous, never qualified
    alone = overlay(  # so its outputs are compared with no record of r1
        project.root / "alone/crash-on-boot.yaml", "releases/faulty/crash-on-boot.yaml",
        gates={**TRIMMED_GATES, "determinism": {**TRIMMED_DETERMINISM, "against_previous": False}},
    )  # fmt: skip
    done = project.qualify(alone)
    assert done.returncode == 1, done.stdout + done.stderr

    body = _posted(prefect_api, receiver, "crash-on-boot", "Failed")
    assert body["source"] == "sparkgate"
    assert body["cluster"] == CLUSTER
    assert body["run"].startswith(f"qualify crash-on-boot on {CLUSTER} ("), body
    message = _one_line(body)
    assert message.startswith("crash-on-boot failed at determinism: "), message
    assert "boot failed" in message, message
    assert {"release:crash-on-boot", f"cluster:{CLUSTER}"} <= set(body["tags"])
    _a_run_link(prefect_api, body)


@IN_A_TERMINAL
def test_a_qualification_that_waits_posts_the_commands_then_its_expiry(
    prefect_api: Server, receiver: Receiver, project: PromotionProject
) -> None:
    impatient = overlay(
        project.root / "impatient/r1.yaml", "releases/r1.yaml",
        gates=TRIMMED_GATES, promotion={"timeout_s": WAIT_S},
    )  # fmt: skip
    done = project.run("qualify", str(impatient), "-c", str(project.cluster), timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr  # nobody decided

    paused = _posted(prefect_api, receiver, "r1", "Paused")
    assert paused["verdict"] == "qualified", paused
    assert _one_line(paused) == (
        f"r1 qualified, waiting for a decision: sparkgate approve r1 -c {CLUSTER} | "
        f"sparkgate reject r1 -c {CLUSTER} --reason TEXT"
    )
    _a_run_link(prefect_api, paused)
    # ours, naming the reason; when Prefect's server expired the pause first, its own Failed
    # ("The flow was paused and never resumed.") was posted before it, and ours still follows
    reason = f"r1: qualified, but no decision within {WAIT_S} s"
    expired = _posted(prefect_api, receiver, "r1", "Failed", says=reason)
    assert _one_line(expired).startswith(reason)
    assert expired["url"] == paused["url"]


def test_a_nightly_run_with_a_bad_release_posts_one_line(
    prefect_api: Server, receiver: Receiver
) -> None:
    nightly = subprocess.run(
        [sys.executable, "-c", NIGHTLY_WITH_A_BAD_RELEASE],
        env=prefect_api.env, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert "Finished in state Failed" in nightly.stdout + nightly.stderr, nightly.stderr
    assert "Traceback" not in nightly.stdout + nightly.stderr, nightly.stderr
    body = _posted(prefect_api, receiver, "nosuch", "Failed")
    assert body["run"] == "nightly qualify nosuch on local", body
    assert body["message"].startswith("nightly qualification of nosuch on local: "), body
    assert "'nosuch': no such file" in body["message"]
    assert "\n" not in body["message"]
    assert {"release:nosuch", "cluster:local"} <= set(body["tags"])
    _a_run_link(prefect_api, body)


SERVED = "notifyworker"  # the worker's cluster, in its own project
POOL = "sparkgate"  # the pool prefect.yaml names


@pytest.fixture
def worker(prefect_api: Server, tmp_path: Path) -> Iterator[Path]:
    """A process worker on the pool, its project (SPARKGATE_ROOT) in tmp, the deployments of the
    shipped prefect.yaml on the server."""
    prefect_api.cli("work-pool", "create", POOL, "--type", "process", "--overwrite")
    prefect_api.cli("deploy", "--all", timeout_s=300)
    env = {**prefect_api.env, "SPARKGATE_ROOT": str(tmp_path),
           "SPARKGATE_STATE_DIR": str(ROOT / ".sparkgate")}  # fmt: skip
    argv = [PREFECT, "worker", "start", "--pool", POOL, "--limit", "1", "--name", "notify-worker"]
    process = spawn(argv, env, prefect_api.logs / "notify-worker.log")
    try:
        yield tmp_path
    finally:
        stop(process)


def test_a_nightly_run_on_a_worker_posts_its_pause_then_its_expiry(
    prefect_api: Server, receiver: Receiver, worker: Path
) -> None:
    """A deployment run served by a worker: its qualification pauses (wait: true) for a
    decision nobody gives within 5 s; both posts carry a one-line message and the run's link,
    and the nightly run itself ends Failed with that one line, not "encountered an exception"."""
    release_overlay(worker / "releases/r1.yaml", gates=SMALLEST_GATES,
                    promotion={"timeout_s": WAIT_S})  # fmt: skip
    cluster_overlay(worker / "config" / f"{SERVED}.yaml", SERVED, worker, nodes=("w0", "w1"))
    nightly = prefect_api.get("/deployments/name/nightly-qualification/nightly")
    status, run = prefect_api.post(
        f"/deployments/{nightly['id']}/create_flow_run",
        {"parameters": {"release": "r1", "cluster": SERVED, "wait": True}},
    )
    assert status == 201, run

    paused = _posted(prefect_api, receiver, "r1", "Paused")
    assert paused["cluster"] == SERVED, paused
    assert _one_line(paused).startswith("r1 qualified, waiting for a decision: sparkgate approve")
    _a_run_link(prefect_api, paused)
    reason = f"r1: qualified, but no decision within {WAIT_S} s"  # after Prefect's, if it won
    expired = _posted(prefect_api, receiver, "r1", "Failed", says=reason)
    assert _one_line(expired).startswith(reason)
    assert expired["url"] == paused["url"]

    def ended() -> dict[str, Any] | None:
        state = prefect_api.get(f"/flow_runs/{run['id']}").get("state") or {}
        return dict(state) if state.get("type") in {"FAILED", "CRASHED", "COMPLETED"} else None

    state = wait_until(ended, 120, "the nightly run to end", interval_s=2,
                       detail=prefect_api.tails)  # fmt: skip
    assert state["type"] == "FAILED", state
    assert state["message"] == expired["message"], state
