"""The embedded Prefect server: started by us, in its own session, stopped when the run ends.

Prefect's own ephemeral server is a child in the caller's process group, so a Ctrl-C on the
terminal kills it together with the flow, and the flow then hangs retrying API calls instead of
cleaning up (stopping ranks, releasing the lock). Starting the same server (same app, same
project-local database) in a session of its own lets the interrupt reach only the flow, which
ends the run as Crashed and stops what it started. When PREFECT_API_URL names a server, that
server is used and nothing is started here. Import after `flows.settings.prefect_environment()`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from flows.errors import SparkgateError

HEALTH_POLL_S = 0.2
STOP_GRACE_S = 10.0


@contextlib.contextmanager
def prefect_backend(log_dir: Path) -> Iterator[str]:
    """Yield the API URL to use: the configured server, or an embedded one we own."""
    configured = os.environ.get("PREFECT_API_URL")
    if configured:
        yield configured
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings  # noqa: PLC0415

    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / "embedded-server.log").open("ab") as log:
        server = subprocess.Popen(
            _server_argv(port),
            env={**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_healthy(url, server, log_dir / "embedded-server.log")
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield url
    finally:
        _stop(server)


def _server_argv(port: int) -> list[str]:
    return [
        sys.executable, "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on",
    ]  # fmt: skip


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    timeout = float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SparkgateError(
                f"the embedded Prefect server exited with {server.returncode}; see {log}"
            )
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(HEALTH_POLL_S)
    _stop(server)
    raise SparkgateError(f"the embedded Prefect server was not healthy after {timeout:g} s; {log}")


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()
