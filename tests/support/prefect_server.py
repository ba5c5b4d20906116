"""A real local Prefect server for integration tests: `prefect server start` on a free port.

The server has a fresh SQLite database in a private PREFECT_HOME, or the PostgreSQL database a
test gives (`database_url`, e.g. tests/support/postgres.py), analytics off, and the UI off unless
a test asks for it (`ui=True`: the browser test); clients get its URL through the environment
`Server.env` (the database URL goes to the server process alone). Server and anything spawned
with `spawn` end by process group (`stop`), and a failing test can print the tails of every log
in `Server.logs`.

Starting a server costs seconds to a minute on a loaded machine, so the session shares one
(`prefect_api`, UI on): its tests tell their runs apart by name, tag, release file or cluster,
never by being alone on it; a module's in-process flows reach it through `prefect_in_process`.
A test that needs a server of its own says why (the scale-out test: a PostgreSQL database; the
embedded mode's own tests). Every test that starts or uses a server carries the `prefect_server`
marker (tests/conftest.py refuses one that does not), and `make unit` leaves them out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .net import free_port
from .paths import ROOT
from .waiting import wait_until

PREFECT = str(Path(sys.executable).parent / "prefect")
START_S = 300


@dataclass
class Server:
    """A running server: its API URL, the environment clients need, and the logs to show."""

    api: str
    env: dict[str, str]
    logs: Path

    @property
    def ui(self) -> str:
        """The web UI's root URL (served only by a server started with `ui=True`)."""
        return self.api.removesuffix("/api")

    def tails(self) -> str:
        """The last lines of every log in the server's folder."""
        parts = []
        for log in sorted(self.logs.glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-60:]
            parts.append(f"--- {log.name} (last {len(lines)} lines) ---\n" + "\n".join(lines))
        return "\n".join(parts)

    def get(self, path: str) -> Any:
        """GET an API path as JSON."""
        with urllib.request.urlopen(f"{self.api}{path}", timeout=30) as response:
            return json.loads(response.read())

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """POST JSON to an API path; (status, JSON answer or error text)."""
        request = urllib.request.Request(
            f"{self.api}{path}", data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")

    def cli(self, *args: str, timeout_s: float = 240, **env: str) -> str:
        """`prefect --no-prompt ARGS` against the server; its output (asserts success)."""
        done = subprocess.run(
            [PREFECT, "--no-prompt", *args], env={**self.env, **env}, cwd=ROOT,
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"prefect {' '.join(args)} failed:\n{output}\n{self.tails()}"
        return output


def clean_env(home: Path, api: str, *, ui: bool = False) -> dict[str, str]:
    """This environment without any PREFECT_ setting, then the ones that point at `api`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return {
        **env,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_UI_ENABLED": "true" if ui else "false",
        "PREFECT_WORKER_QUERY_SECONDS": "2",
        "PREFECT_LOGGING_LEVEL": "INFO",
    }


def stop(process: subprocess.Popen[Any]) -> None:
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


def spawn(
    argv: list[str], env: dict[str, str], log: Path, cwd: Path = ROOT
) -> subprocess.Popen[bytes]:
    """Start `argv` in a session of its own, output to `log`."""
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


@contextmanager
def prefect_server(
    folder: Path, port: int, *, database_url: str | None = None, ui: bool = False
) -> Iterator[Server]:
    """`prefect server start` on `port` until healthy: a fresh SQLite database under `folder`, or
    `database_url` (PREFECT_SERVER_DATABASE_CONNECTION_URL, e.g. postgresql+asyncpg://...).

    With `ui` the server also serves its web UI at the port's root (`Server.ui`).
    """
    api = f"http://127.0.0.1:{port}/api"
    started = Server(api=api, env=clean_env(folder / "home", api, ui=ui), logs=folder)
    argv = [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    argv += [] if ui else ["--no-ui"]
    database = {"PREFECT_SERVER_DATABASE_CONNECTION_URL": database_url} if database_url else {}
    process = spawn(argv, {**started.env, **database}, folder / "server.log")
    try:

        def healthy() -> bool:
            assert process.poll() is None, f"the server exited:\n{started.tails()}"
            try:
                return started.get("/health") is True
            except (OSError, ValueError):
                return False

        wait_until(healthy, START_S, "/api/health", interval_s=1, detail=started.tails)
        yield started
    finally:
        stop(process)


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The session's real Prefect server, with its web UI (fresh private database, free port)."""
    with prefect_server(tmp_path_factory.mktemp("prefect-server"), free_port(), ui=True) as server:
        yield server


@pytest.fixture(scope="module")
def prefect_in_process(prefect_api: Server) -> Iterator[None]:
    """A module's in-process flows report to the session's server, then the settings before.

    Module-scoped: Prefect's settings are this process's while the module runs, and put back at
    its end, so no later in-process test talks to a server it did not ask for. Prefect's own
    test harness would start a server of its own for each module (about 10 s each here).
    """
    from prefect.logging.handlers import APILogWorker  # noqa: PLC0415
    from prefect.settings import PREFECT_API_URL, temporary_settings  # noqa: PLC0415

    with temporary_settings({PREFECT_API_URL: prefect_api.api}):
        yield
        APILogWorker.drain_all(timeout=10)  # queued run logs go now, while the server is up
