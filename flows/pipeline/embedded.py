"""The embedded Prefect server: started by us, in its own session, stopped when the run ends.

Prefect's own ephemeral server is a child in the caller's process group, so a Ctrl-C on the
terminal kills it together with the flow, and the flow then hangs retrying API calls instead of
cleaning up (stopping ranks, releasing the lock). Starting the same server (same app, same
project-local database) in a session of its own lets the interrupt reach only the flow, which
ends the run as Crashed and stops what it started. When PREFECT_API_URL names a server, that
server is used and nothing is started here. The server dies with us: it asks the kernel for
SIGTERM when its parent dies (PR_SET_PDEATHSIG), so even a SIGKILLed `qualify` leaves no server
behind. Import after `flows.settings.prefect_environment()`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from flows.engine_api.ready import probe_ready
from flows.errors import SparkgateError
from flows.net import free_port
from flows.record.atomic import write_text

HEALTH_POLL_S = 0.2
STOP_GRACE_S = 10.0
DRAIN_TIMEOUT_S = 10.0
SERVERS_DIR = "embedded-servers"
PR_SET_PDEATHSIG = 1


@contextlib.contextmanager
def prefect_backend(log_dir: Path) -> Iterator[str]:
    """Yield the API URL to use: the configured server, or an embedded one we own."""
    configured = os.environ.get("PREFECT_API_URL")
    if configured:
        yield configured
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings  # noqa: PLC0415

    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / "embedded-server.log").open("ab") as log:
        server = subprocess.Popen(
            _server_argv(port),
            env={**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_dies_with(os.getpid()),  # noqa: PLW1509 - only async-signal-safe calls
        )
    advert = servers_dir() / f"{server.pid}.url"
    try:
        _wait_healthy(url, server, log_dir / "embedded-server.log")
        advert.parent.mkdir(parents=True, exist_ok=True)
        write_text(advert, url + "\n")
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield url
    finally:
        advert.unlink(missing_ok=True)
        _drain_prefect_workers()
        _stop(server)


@contextlib.contextmanager
def running_backend(folder: Path | None = None) -> Iterator[str | None]:
    """Point Prefect at the server a waiting run uses: the configured one, else a live embedded
    server on this PREFECT_HOME (adverts in `folder`, default `servers_dir()`); None when
    neither exists (then no embedded run can be waiting)."""
    configured = os.environ.get("PREFECT_API_URL")
    if configured:
        yield configured
        return
    url = next((u for u in advertised(folder or servers_dir()) if _healthy(u)), None)
    if url is None:
        yield None
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings  # noqa: PLC0415

    with temporary_settings(updates={PREFECT_API_URL: url}):
        yield url


def servers_dir() -> Path:
    """Where running embedded servers of this PREFECT_HOME leave their URLs."""
    from prefect.settings import get_current_settings  # noqa: PLC0415

    return Path(get_current_settings().home) / SERVERS_DIR


def advertised(folder: Path) -> list[str]:
    """URLs of the embedded servers that said they run (newest first; some may be gone)."""
    files = sorted(folder.glob("*.url"), key=lambda f: f.stat().st_mtime, reverse=True)
    return [text for f in files if (text := _read(f))]


def _read(file: Path) -> str:
    try:
        return file.read_text().strip()
    except OSError:  # removed by its server a moment ago
        return ""


def _healthy(url: str) -> bool:
    return probe_ready(f"{url}/health", timeout_s=2)


def _dies_with(parent: int) -> Callable[[], None]:
    """In the child before exec: SIGTERM me when my parent dies; exit if it already has.

    prctl is looked up here, in the parent: the child between fork and exec only calls it.
    """
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request was in place
            os._exit(1)

    return arm


def _server_argv(port: int) -> list[str]:
    return [
        sys.executable, "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on",
    ]  # fmt: skip


def _wait_healthy(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    timeout = float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SparkgateError(
                f"the embedded Prefect server exited with {server.returncode}; see {log}"
            )
        if _healthy(url):
            return
        time.sleep(HEALTH_POLL_S)
    _stop(server)
    raise SparkgateError(f"the embedded Prefect server was not healthy after {timeout:g} s; {log}")


def _drain_prefect_workers() -> None:
    """Send Prefect's buffered logs and events while the server still runs.

    Left to the interpreter's exit, they are sent to a stopped server, and the command hangs
    for about a minute of connection retries after its work is done.
    """
    from prefect.events.worker import EventsWorker  # noqa: PLC0415
    from prefect.logging.handlers import APILogWorker  # noqa: PLC0415

    for worker in (APILogWorker, EventsWorker):
        worker.drain_all(timeout=DRAIN_TIMEOUT_S, at_exit=False)


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
