"""Attack: the embedded Prefect API is open to any local user.

`qualify` and `calibrate` start Prefect's server on loopback; any user of the machine could read
every flow run's parameters, or resume a paused qualification (approve a release) with one
unauthenticated request. Now each embedded server has a random secret (basic auth) that only our
own clients get: the flow's process, and `sparkgate approve/reject` from a second terminal, which
read it from a 0600 file beside the server's advert.
"""

from __future__ import annotations

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
        yield Embedded(ready.read_text().strip(), run.pid, env, root / "state", logs)
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


def _basic(secret: str) -> tuple[str, str]:
    user, _, password = secret.partition(":")
    return user, password
