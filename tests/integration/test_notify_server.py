"""A qualification that fails is announced: a real server's automation posts to a local webhook.

`sparkgate notify URL --allow-private` against a real `prefect server start`; then a flow named
like the qualification flow, tagged as one, fails in another process. The server's triggers see
the failure event and its actions post the rendered body to the receiver here, naming the run,
the release and the state, with the run's URL.
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
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def test_a_failed_qualification_posts_release_state_and_url(
    prefect_api: Server, receiver: Receiver
) -> None:
    notify = subprocess.run(
        [sys.executable, "-m", "flows", "notify", receiver.url, "--allow-private"],
        env=prefect_api.env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert notify.returncode == 0, notify.stdout + notify.stderr + prefect_api.tails()
    assert "posts to" in notify.stderr
    failed = subprocess.run(
        [sys.executable, "-c", FAILING_QUALIFICATION],
        env=prefect_api.env, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert "Finished in state Failed" in failed.stdout + failed.stderr, failed.stderr

    wait_until(lambda: bool(receiver.bodies), 120, "the webhook post", interval_s=1,
               detail=prefect_api.tails)  # fmt: skip
    body = receiver.bodies[0]
    assert body["source"] == "sparkgate"
    assert body["release"] == "r9"
    assert body["run"] == "qualify r9 on local (tp2-local)"
    assert body["state"] == "Failed"
    assert "slower beyond 3%" in body["message"]
    assert "release:r9" in body["tags"]
    assert isinstance(body["url"], str)


def test_notify_refuses_without_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.cli import main  # noqa: PLC0415

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert main(["notify", "http://127.0.0.1:9/hook"]) == 2
    assert main(["notify", "ftp://example.invalid/hook"]) == 2
