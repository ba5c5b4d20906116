"""The embedded Prefect server: started by us, in its own session, stopped when the run ends.

Prefect's own ephemeral server is a child in the caller's process group, so a Ctrl-C on the
terminal kills it together with the flow, and the flow then hangs retrying API calls instead of
cleaning up (stopping ranks, releasing the lock). Starting the same server (same app, same
project-local database) in a session of its own lets the interrupt reach only the flow, which
ends the run as Crashed and stops what it started. When PREFECT_API_URL names a server, that
server is used and nothing is started here. The server dies with us: it asks the kernel for
SIGTERM when its parent dies (PR_SET_PDEATHSIG), so even a SIGKILLed `qualify` leaves no server
behind. Import after `flows.settings.prefect_environment()`.

Starting the server takes seconds (it imports Prefect and opens the database), and so does
importing Prefect and the flow in the run's own process. `launched_backend()` starts the server
without importing Prefect, the caller then imports its flow, and `Backend.ready()` waits for the
server: the two overlap (`prefect_backend()` does both at once). The server is stopped when
`launched_backend()` ends, however it ends, also before `ready()` was reached.

The server listens on loopback, where every local user can reach it, so it requires a random
secret of its own (Prefect's basic auth, PREFECT_SERVER_API_AUTH_STRING, given in its
environment, never on a command line): the flow's process gets it as PREFECT_API_AUTH_STRING,
and `sparkgate approve/reject` read it from `<pid>.auth` beside the server's advert, a 0600
file in a 0700 folder that is removed with the advert. Only `/api/health` and `/api/ready`
answer without it: the server runs `embedded_server.py`, which puts Prefect's whole app (its
`/docs` and `/openapi.json` too) behind the secret and removes the advert and the secret itself
when it stops, so a killed run leaves neither behind.

One server per run, and every Prefect call reaches it: Prefect's settings context is per thread
(a context variable); a thread without one (a pool worker, Prefect's own log and event workers)
fell back to the process-global settings made at import, found no API URL and started a
temporary server of its own, without the secret, on the same database. So the URL and the
secret are put in Prefect's process-global settings too while the server runs, and
`flows.settings.prefect_environment()` turns Prefect's temporary servers off: a call that still
finds no URL fails instead of starting one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from flows.engine_api.ready import probe_ready
from flows.errors import SparkgateError
from flows.fileio import write_text
from flows.net import free_port
from flows.settings import prefect_home

HEALTH_POLL_S = 0.2
STOP_GRACE_S = 10.0
DRAIN_TIMEOUT_S = 10.0
SERVERS_DIR = "embedded-servers"
PR_SET_PDEATHSIG = 1
AUTH_USER = "sparkgate"
SECRET_BYTES = 32
ENV_URL = "PREFECT_API_URL"
ENV_SECRET = "PREFECT_API_AUTH_STRING"  # noqa: S105 - a variable name
SERVER_SCRIPT = Path(__file__).with_name("embedded_server.py")

_embedded: list[str] = []  # the URL of the embedded server this process runs, while it runs


@contextlib.contextmanager
def prefect_backend(log_dir: Path) -> Iterator[str]:
    """Yield the API URL to use: the configured server, or an embedded one we own."""
    with launched_backend(log_dir) as backend, backend.ready() as url:
        yield url


@dataclass(frozen=True)
class Backend:
    """The server a run uses, launched but not yet waited for (`ready()` waits).

    `server` is None when PREFECT_API_URL names the server: nothing was started.
    """

    url: str
    server: subprocess.Popen[bytes] | None = None
    secret: str = field(default="", repr=False)  # never in a traceback's or a log's repr
    folder: Path = Path()
    log: Path = Path()

    @contextlib.contextmanager
    def ready(self) -> Iterator[str]:
        """Wait until the server is healthy, advertise it and point Prefect at it; yield its URL.

        Prefect is imported here, not at the launch: its import is what the server's start
        overlaps. Prefect's buffered logs and events are sent before the server is stopped.
        """
        if self.server is None:
            yield self.url
            return
        from prefect.settings import (  # noqa: PLC0415
            PREFECT_API_AUTH_STRING,
            PREFECT_API_URL,
            temporary_settings,
        )

        url, secret = self.url, self.secret
        _wait_healthy(url, self.server, self.log)
        advert, key = _advert_files(self.folder, self.server)
        try:
            _write_private(key, secret + "\n")  # before the advert: whoever finds the URL finds it
            write_text(advert, url + "\n")
            with (
                _global_settings({ENV_URL: url, ENV_SECRET: secret}),
                temporary_settings(updates={PREFECT_API_URL: url, PREFECT_API_AUTH_STRING: secret}),
            ):
                _embedded.append(url)
                try:
                    yield url
                finally:
                    _embedded.remove(url)
        finally:
            advert.unlink(missing_ok=True)
            key.unlink(missing_ok=True)
            _drain_prefect_workers()


@contextlib.contextmanager
def launched_backend(log_dir: Path) -> Iterator[Backend]:
    """Start the embedded server now (nothing when PREFECT_API_URL names one), stop it on the
    way out, however that happens; `Backend.ready()` waits for it.

    The server's start (several seconds, in its own process) overlaps whatever the caller does
    before `ready()`, such as importing Prefect and the flow: so this module imports no Prefect
    to launch it. Call after `flows.settings.prefect_environment()`: the server inherits the
    environment, its database and adverts are in that PREFECT_HOME.
    """
    configured = os.environ.get(ENV_URL)
    if configured:
        yield Backend(configured)
        return
    port = free_port()
    log = log_dir / "embedded-server.log"
    secret = f"{AUTH_USER}:{secrets.token_urlsafe(SECRET_BYTES)}"
    log_dir.mkdir(parents=True, exist_ok=True)
    folder = servers_dir()
    _private_folder(folder)
    with log.open("ab") as written:
        server = subprocess.Popen(
            _server_argv(port, folder),
            env={
                **os.environ,
                "PREFECT_UI_ENABLED": "0",
                "PREFECT__SERVER_EPHEMERAL": "1",
                "PREFECT_SERVER_API_AUTH_STRING": secret,
            },
            stdout=written,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_dies_with(os.getpid()),  # noqa: PLW1509 - only async-signal-safe calls
        )
    try:
        yield Backend(f"http://127.0.0.1:{port}/api", server, secret, folder, log)
    finally:
        for file in _advert_files(folder, server):  # gone already, unless `ready()` failed
            file.unlink(missing_ok=True)
        _stop(server)


def _advert_files(folder: Path, server: subprocess.Popen[bytes]) -> tuple[Path, Path]:
    """The server's advert (its URL) and its secret's file."""
    return folder / f"{server.pid}.url", folder / f"{server.pid}.auth"


def embedded_url() -> str | None:
    """The API URL of the embedded server this process runs now, or None (a configured server,
    or none at all)."""
    return _embedded[-1] if _embedded else None


@contextlib.contextmanager
def _global_settings(values: dict[str, str]) -> Iterator[None]:
    """`values` in Prefect's process-global settings (every thread's fallback), for a while.

    Prefect makes them from the environment; the environment holds `values` only while they are
    made, so the processes a run starts (build commands, ranks) inherit neither URL nor secret.
    """
    from prefect.context import refresh_global_settings_context  # noqa: PLC0415

    before = {name: os.environ.get(name) for name in values}
    try:
        os.environ.update(values)
        refresh_global_settings_context()
    finally:
        _restore(before)
    try:
        yield
    finally:
        refresh_global_settings_context()


def _restore(before: dict[str, str | None]) -> None:
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextlib.contextmanager
def running_backend(folder: Path | None = None) -> Iterator[str | None]:
    """Point Prefect at the server a waiting run uses: the configured one, else a live embedded
    server on this PREFECT_HOME (adverts in `folder`, default `servers_dir()`), with its secret;
    None when neither exists (then no embedded run can be waiting)."""
    configured = os.environ.get(ENV_URL)
    if configured:
        yield configured
        return
    found = next((a for a in adverts(folder or servers_dir()) if _healthy(a[0])), None)
    if found is None:
        yield None
        return
    from prefect.settings import (  # noqa: PLC0415
        PREFECT_API_AUTH_STRING,
        PREFECT_API_URL,
        temporary_settings,
    )

    url, secret = found
    with temporary_settings(updates={PREFECT_API_URL: url, PREFECT_API_AUTH_STRING: secret}):
        yield url


def servers_dir() -> Path:
    """Where running embedded servers of this PREFECT_HOME leave their URLs."""
    return prefect_home() / SERVERS_DIR


def advertised(folder: Path) -> list[str]:
    """URLs of the embedded servers that said they run (newest first; some may be gone)."""
    return [url for url, _secret in adverts(folder)]


def adverts(folder: Path) -> list[tuple[str, str | None]]:
    """(URL, secret) of the embedded servers that said they run, newest first; the secret is
    None when its file is missing or unreadable (then the server refuses us)."""
    files = sorted(folder.glob("*.url"), key=_mtime, reverse=True)
    return [(url, _read(f.with_suffix(".auth")) or None) for f in files if (url := _read(f))]


def _mtime(file: Path) -> float:
    try:
        return file.stat().st_mtime
    except OSError:  # removed by its server a moment ago
        return 0.0


def _read(file: Path) -> str:
    try:
        return file.read_text().strip()
    except OSError:  # removed by its server a moment ago, or not ours to read
        return ""


def _private_folder(folder: Path) -> None:
    """The adverts' folder, readable by its owner only (the secrets live in it)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)


def _write_private(file: Path, text: str) -> None:
    """Create `file` for its owner only (0600 from the start, never through a symlink)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    handle = os.open(file, flags, 0o600)
    try:
        os.fchmod(handle, 0o600)
        os.write(handle, text.encode())
    finally:
        os.close(handle)


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


def _server_argv(port: int, adverts: Path) -> list[str]:
    return [sys.executable, str(SERVER_SCRIPT), str(port), str(adverts)]


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
