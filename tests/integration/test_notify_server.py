"""A qualification that pauses or fails is announced: a real server's automation posts to a
local webhook, with a one-line message and the run's UI link.

`sparkgate notify URL --allow-private` against a real `prefect server start`; then flows named
like the qualification flow, tagged as one, fail or pause in another process (a run started
from a terminal), and the nightly deployment's flow fails on a release name that loads no
spec. The server's triggers see each event and its actions post the rendered body to the
receiver here, naming the run, the release, the state and the verdict, with the benchmark
headline the run labelled itself with and the run's URL.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from tests.support.net import free_port
from tests.support.paths import ROOT
from tests.support.prefect_server import Server
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.prefect_server, pytest.mark.timeout(600)]

FAILING_QUALIFICATION = """
from prefect import flow, tags

@flow(name="qualify-release")
def qualify() -> None:
    raise RuntimeError("r9 failed at benchmark: slower beyond 3%")

with tags("release:r9", "cluster:local"):
    qualify.with_options(flow_run_name="qualify r9 on local (tp2-local)")(return_state=True)
"""

HEADLINE = "4 gated at 3%: 4 faster; largest prefill/512 prefill_tps +12.0% [+10.1, +13.9] faster"

PAUSING_QUALIFICATION = f"""
from prefect import flow, tags
from prefect.flow_runs import pause_flow_run
from flows.pipeline.notify import label_verdict

@flow(name="qualify-release")
def qualify() -> None:
    label_verdict("qualified", {HEADLINE!r})
    pause_flow_run(timeout=5, poll_interval=1)

with tags("release:r8", "cluster:local"):
    qualify.with_options(flow_run_name="qualify r8 on local (tp2-local)")(return_state=True)
"""

NIGHTLY_WITH_A_BAD_RELEASE = """
from flows.pipeline.deployments import nightly_qualification

nightly_qualification(release="nosuch", return_state=True)
"""


class Receiver:
    """A webhook receiver on loopback that keeps every JSON body it is sent."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                bodies.append(json.loads(self.rfile.read(length) or b"{}"))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                """Quiet."""

        self.server = HTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


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


def _posted(server: Server, receiver: Receiver, run: str, state: str) -> dict[str, Any]:
    """The body posted for run `run` entering `state` (waits up to 2 min)."""

    def found() -> dict[str, Any] | None:
        return next(
            (b for b in receiver.bodies if b.get("run") == run and b.get("state") == state), None
        )

    return wait_until(found, 120, f"the webhook post for {run} {state}", interval_s=1,
                      detail=lambda: f"{receiver.bodies}\n{server.tails()}")  # fmt: skip


def _a_run_link(server: Server, body: dict[str, Any]) -> None:
    url = body["url"]
    assert isinstance(url, str), body
    assert url.startswith(f"{server.ui}/runs/flow-run/"), body


def test_a_failed_qualification_posts_release_state_and_url(
    prefect_api: Server, receiver: Receiver
) -> None:
    failed = subprocess.run(
        [sys.executable, "-c", FAILING_QUALIFICATION],
        env=prefect_api.env, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert "Finished in state Failed" in failed.stdout + failed.stderr, failed.stderr

    body = _posted(prefect_api, receiver, "qualify r9 on local (tp2-local)", "Failed")
    assert body["source"] == "sparkgate"
    assert (body["release"], body["cluster"]) == ("r9", "local")
    assert "slower beyond 3%" in body["message"]
    assert "release:r9" in body["tags"]
    _a_run_link(prefect_api, body)


def test_a_paused_qualification_posts_its_verdict_headline_and_url(
    prefect_api: Server, receiver: Receiver
) -> None:
    paused = subprocess.run(
        [sys.executable, "-c", PAUSING_QUALIFICATION],
        env=prefect_api.env, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert "Finished in state Failed" in paused.stdout + paused.stderr, paused.stderr
    run = "qualify r8 on local (tp2-local)"
    body = _posted(prefect_api, receiver, run, "Paused")
    assert body["message"] == (
        "r8 qualified, waiting for a decision: sparkgate approve r8 -c local | "
        f"sparkgate reject r8 -c local --reason TEXT; benchmark: {HEADLINE}"
    )
    assert (body["verdict"], body["benchmark"]) == ("qualified", HEADLINE)
    _a_run_link(prefect_api, body)
    expired = _posted(prefect_api, receiver, run, "Failed")  # nobody decided within 5 s
    assert expired["message"].endswith(f"; benchmark: {HEADLINE}"), expired
    assert expired["url"] == body["url"]


def test_a_nightly_run_with_a_bad_release_posts_one_line(
    prefect_api: Server, receiver: Receiver
) -> None:
    nightly = subprocess.run(
        [sys.executable, "-c", NIGHTLY_WITH_A_BAD_RELEASE],
        env=prefect_api.env, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert "Finished in state Failed" in nightly.stdout + nightly.stderr, nightly.stderr
    assert "Traceback" not in nightly.stdout + nightly.stderr, nightly.stderr
    body = _posted(prefect_api, receiver, "nightly qualify nosuch on local", "Failed")
    assert body["message"].startswith("nightly qualification of nosuch on local: "), body
    assert "'nosuch': no such file" in body["message"]
    assert "\n" not in body["message"]
    assert {"release:nosuch", "cluster:local"} <= set(body["tags"])
    _a_run_link(prefect_api, body)
