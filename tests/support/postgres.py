"""A private PostgreSQL server for tests: Debian's `postgresql` binaries, a fresh cluster each time.

Never the system's cluster and never a mock: `initdb` makes a new data folder in a temp folder of
its own, and `postgres` serves it on a free loopback port only (trust authentication, which
is fine on a loopback port of a throwaway cluster; durability off, since the data dies with the
test). PostgreSQL refuses to run as root, so under root the server runs as the `postgres` system
user the package creates, and its folder (under /tmp, which that user can reach, unlike pytest's
root-only temp folders) belongs to that user. The server ends with the context: a fast shutdown
(SIGINT to its process group), then SIGKILL, and the folder is removed.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from .waiting import wait_until

PG_LIB = Path("/usr/lib/postgresql")
SERVICE_USER = "postgres"
DATABASE = "prefect"
ROLE = "sparkgate"
START_S = 60
TOOLS = ("initdb", "postgres", "pg_isready", "createdb")


def server_binaries() -> Path | None:
    """The newest installed server's bin folder (with every tool in TOOLS), or None."""
    found = [
        folder / "bin"
        for folder in PG_LIB.glob("*")
        if all((folder / "bin" / tool).is_file() for tool in TOOLS)
    ]
    return max(found, key=lambda path: int(path.parent.name), default=None) if found else None


def postgres_unavailable() -> str | None:
    """Why a private PostgreSQL cannot run here, or None."""
    if server_binaries() is None:
        return f"no PostgreSQL server under {PG_LIB} (apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVICE_USER)
        except KeyError:
            return f"running as root and no {SERVICE_USER!r} user to run PostgreSQL as"
        if shutil.which("runuser") is None:
            return "running as root and no runuser to run PostgreSQL as another user"
    return None


@dataclass
class Postgres:
    """A running private server: its SQLAlchemy URL for Prefect and its log."""

    port: int
    folder: Path

    @property
    def url(self) -> str:
        """The database as PREFECT_SERVER_DATABASE_CONNECTION_URL takes it."""
        return f"postgresql+asyncpg://{ROLE}@127.0.0.1:{self.port}/{DATABASE}"

    def tail(self) -> str:
        """The last lines of the server's log."""
        log = self.folder / "server.log"
        lines = log.read_text(errors="replace").splitlines()[-40:] if log.is_file() else []
        return f"--- postgres server.log (last {len(lines)} lines) ---\n" + "\n".join(lines)


def _as_owner() -> list[str]:
    """The prefix that runs a command as the server's owner (none unless we are root)."""
    return ["runuser", "-u", SERVICE_USER, "--"] if os.geteuid() == 0 else []


def _stop(process: subprocess.Popen[bytes]) -> None:
    for sig, grace in ((signal.SIGINT, 30), (signal.SIGKILL, 10)):
        if process.poll() is not None:
            break
        with suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)


@contextmanager
def private_postgres(port: int) -> Iterator[Postgres]:
    """A fresh cluster serving database `prefect` to role `sparkgate` on 127.0.0.1:`port`."""
    binaries = server_binaries()
    assert binaries is not None, postgres_unavailable()
    folder = Path(tempfile.mkdtemp(prefix="sparkgate-pg-"))
    try:
        if os.geteuid() == 0:
            owner = pwd.getpwnam(SERVICE_USER)
            os.chown(folder, owner.pw_uid, owner.pw_gid)
        as_owner = _as_owner()
        data = folder / "data"
        subprocess.run(
            [*as_owner, str(binaries / "initdb"), "-D", str(data), "-U", ROLE, "--auth=trust",
             "-E", "UTF8", "--no-sync"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        argv = [*as_owner, str(binaries / "postgres"), "-D", str(data), "-p", str(port),
                "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={folder}",
                "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                "-c", "max_connections=200", "-c", "logging_collector=off"]  # fmt: skip
        started = Postgres(port=port, folder=folder)
        with (folder / "server.log").open("wb") as out:
            process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            _wait_ready(binaries, started, process)
            subprocess.run(
                [str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port),
                 "-U", ROLE, DATABASE],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            yield started
        finally:
            _stop(process)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _wait_ready(binaries: Path, server: Postgres, process: subprocess.Popen[bytes]) -> None:
    def ready() -> bool:
        assert process.poll() is None, f"postgres exited:\n{server.tail()}"
        probe = subprocess.run(
            [str(binaries / "pg_isready"), "-h", "127.0.0.1", "-p", str(server.port), "-U", ROLE,
             "-d", "postgres", "-q"],
            capture_output=True, timeout=30, check=False,
        )  # fmt: skip
        return probe.returncode == 0

    wait_until(ready, START_S, f"postgres on port {server.port}", detail=server.tail)
