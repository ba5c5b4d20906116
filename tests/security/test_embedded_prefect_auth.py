"""Attack: the embedded Prefect API is open to any local user.

`qualify` and `calibrate` start Prefect's server on loopback; any user of the machine could read
every flow run's parameters, or resume a paused qualification (approve a release) with one
unauthenticated request. Now each embedded server has a random secret (basic auth) that only our
own clients get: the flow's process, and `sparkgate approve/reject` from a second terminal, which
read it from a 0600 file beside the server's advert.

Second round: that server was not the only one. A Prefect call from a thread without Prefect's
settings context found no API URL and started Prefect's own temporary server, unauthenticated,
on the same database (anyone local could resume a paused run there); the root app's `/docs` and
`/openapi.json` answered anyone; and the embedded run took the cluster's slot on its own server.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.prefect_servers import prefect_servers

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.prefect_server]

HOLDER = Path(__file__).with_name("embedded_backend.py")
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Embedded:
    """A running embedded server owned by another process, and that process's environment."""

    url: str
    pid: int
    env: dict[str, str]
    state: Path
    logs: Path
    probe: dict[str, str | None]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    root = tmp_path_factory.mktemp("embedded-auth")
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")} | {
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'engine'}",
        "SPARKGATE_ROOT": str(root),
        "SPARKGATE_STATE_DIR": str(root / "state"),
    }
    ready = root / "url"
    logs = root / "logs"
    run = subprocess.Popen(
        [sys.executable, str(HOLDER), str(logs), str(ready)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while not ready.exists() or not ready.read_text():
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "the embedded server never came up"
            time.sleep(0.2)
        probe = json.loads(ready.with_name("url.probe.json").read_text())
        yield Embedded(ready.read_text().strip(), run.pid, env, root / "state", logs, probe)
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)
        try:
            run.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            run.kill()
            run.communicate()


def test_embedded_prefect_api_refuses_a_request_without_the_secret(embedded: Embedded) -> None:
    with httpx.Client(timeout=30) as client:
        assert client.get(f"{embedded.url}/health").status_code == 200  # probes stay open
        runs = client.post(f"{embedded.url}/flow_runs/filter", json={})
        assert runs.status_code == 401, runs.text
        guessed = client.post(
            f"{embedded.url}/flow_runs/filter", json={}, auth=("sparkgate", "guess")
        )
        assert guessed.status_code == 401


def test_embedded_prefect_secret_is_private_to_its_owner(embedded: Embedded) -> None:
    adverts = embedded.state / "prefect" / "embedded-servers"
    secrets = list(adverts.glob("*.auth"))
    assert len(secrets) == 1
    assert stat.S_IMODE(secrets[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(adverts.stat().st_mode) == 0o700
    secret = secrets[0].read_text().strip()
    assert len(secret) >= 32
    for file in [*embedded.logs.rglob("*"), *adverts.glob("*.url")]:
        if file.is_file():
            assert secret not in file.read_text(errors="replace"), file
    with httpx.Client(timeout=30) as client:
        answer = client.post(f"{embedded.url}/flow_runs/filter", json={}, auth=_basic(secret))
        assert answer.status_code == 200, answer.text


def test_embedded_prefect_approve_from_a_second_process_still_works(embedded: Embedded) -> None:
    """`sparkgate approve` finds the server and its secret and reaches the API: it lists the
    paused runs (none here) instead of failing to authenticate."""
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "approve", "r1", "--by", "alice"],
        capture_output=True, text=True, env=embedded.env, cwd=embedded.env["SPARKGATE_ROOT"],
        timeout=180, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert "no paused qualification of r1 is waiting for a decision" in output, output
    assert "no `sparkgate qualify` of this project is running" not in output, output
    assert "Unauthorized" not in output, output


def test_a_prefect_call_from_a_bare_thread_reaches_the_one_embedded_server(
    embedded: Embedded,
) -> None:
    """A thread without Prefect's settings context used to start a temporary server of its own
    (no secret, same database); it now reaches the run's server, with the secret."""
    reached = str(embedded.probe["thread"])
    assert reached.startswith(embedded.url), f"the thread reached another server: {reached}"
    assert reached.endswith(" ok 0"), f"the thread was refused: {reached}"
    servers = prefect_servers(embedded.state)
    assert len(servers) == 1, f"more than one Prefect server for one run: {servers}"
    port = embedded.url.split(":")[-1].split("/")[0]
    assert port in servers[0].args, servers


def test_embedded_server_answers_nothing_but_probes_without_the_secret(
    embedded: Embedded,
) -> None:
    """Prefect guards its API only: the root app's docs and schema answered anyone."""
    base = embedded.url.removesuffix("/api")
    secret = next((embedded.state / "prefect" / "embedded-servers").glob("*.auth")).read_text()
    with httpx.Client(timeout=30) as client:
        for path in ("/docs", "/openapi.json", "/redoc", "/", "/api/docs", "/api/openapi.json"):
            answer = client.get(base + path)
            assert answer.status_code == 401, f"{path} answered {answer.status_code} unasked"
        assert client.get(base + "/openapi.json", auth=_basic(secret.strip())).status_code == 200
        assert client.get(base + "/api/ready").status_code == 200


def test_embedded_run_takes_no_cluster_slot(embedded: Embedded) -> None:
    """docs/scheduling-and-promotion.md: embedded mode takes no slot; it took one on its own
    server, which a killed run left taken in the database for good."""
    assert embedded.probe["slot"] is None, embedded.probe
    secret = next((embedded.state / "prefect" / "embedded-servers").glob("*.auth")).read_text()
    with httpx.Client(timeout=30, auth=_basic(secret.strip())) as client:
        limit = client.get(f"{embedded.url}/v2/concurrency_limits/cluster:embedded-probe")
        assert limit.status_code == 404, f"the embedded run created its slot: {limit.text}"


def _basic(secret: str) -> tuple[str, str]:
    user, _, password = secret.partition(":")
    return user, password
