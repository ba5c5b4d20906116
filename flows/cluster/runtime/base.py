"""How a rank runs on a node: the one interface the boot loop sees, whatever the runtime.

A runtime starts a rank from its launch plan, says whether it still runs (and how it ended),
returns its log, stops it (signal, grace, then kill) and describes it for evidence. `process`
runs the engine as a process group through the node's transport; `docker` runs the release image
through the node's daemon (`flows.cluster.runtime.docker`). The handle of a started rank is a plain
model, so `sparkgate cluster stop` in another process can find what `cluster start` left running.
"""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from flows.cluster.transport.base import Transport
from flows.errors import TransportError
from flows.spec.launch import LaunchPlan

STOP_POLL_S = 0.2
# The wrapper keeps the rank's exit status: a trapped signal waits for the engine to finish,
# then `$?` is written next to the log. argv reaches the engine as "$@", never as shell text.
_EXIT_WRAPPER = 'trap : TERM INT HUP; "$@"; echo "$?" > "$0"'


class RankHandle(BaseModel):
    """A started rank: where it runs and how to find it again."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    runtime: Literal["process", "docker"]
    node: str
    rank: int
    head: bool
    started_at: datetime
    plan: LaunchPlan
    pid: int | None = Field(default=None, description="Process group id (process runtime).")
    log_path: str | None = Field(default=None, description="Log file on the node (process).")
    exit_path: str | None = Field(default=None, description="Exit status file (process).")
    container: str | None = Field(default=None, description="Container name (docker runtime).")
    container_id: str | None = Field(default=None, description="Container ID (docker runtime).")
    daemon: str | None = Field(default=None, description="Daemon URL (docker runtime).")
    image: str | None = Field(default=None, description="Image tag the rank runs (docker).")

    @classmethod
    def started(
        cls, kind: Literal["process", "docker"], plan: LaunchPlan, at: datetime, **where: Any
    ) -> RankHandle:
        """The handle of the rank `plan` started at `at`; `where` says how to find it."""
        return cls(
            runtime=kind, node=plan.node, rank=plan.rank, head=plan.head, started_at=at,
            plan=plan, **where,
        )  # fmt: skip


class RankStatus(BaseModel):
    """Whether a rank runs, and if not, how it ended."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    running: bool
    exit_code: int | None = None
    oom_killed: bool = False
    detail: str = ""

    def describe(self) -> str:
        """A short phrase for tables and error messages."""
        if self.running:
            return "running"
        if self.oom_killed:
            return "killed by the OOM killer"
        if self.exit_code is None:
            return "gone (exit status unknown)"
        if self.exit_code > 128:
            return f"exited {self.exit_code} (signal {self.exit_code - 128})"
        return f"exited {self.exit_code}"


class Runtime(Protocol):
    """Start, watch, read and stop ranks on the nodes of one cluster."""

    @property
    def kind(self) -> Literal["process", "docker"]:
        """Which runtime this is."""
        ...

    def prepare(self, plan: LaunchPlan) -> None:
        """Create the rank's folders (workdir, caches, logs) on its node."""
        ...

    def start(self, plan: LaunchPlan) -> RankHandle:
        """Start the rank in the background."""
        ...

    def status(self, handle: RankHandle) -> RankStatus:
        """Running, or how it ended."""
        ...

    def read_log(self, handle: RankHandle, offset: int = 0) -> str:
        """The rank's log from byte `offset` on (timestamps where the runtime has them)."""
        ...

    def stop(self, handle: RankHandle) -> RankStatus:
        """Stop signal, grace, then kill; returns how it ended."""
        ...

    def inspect(self, handle: RankHandle) -> dict[str, Any]:
        """Everything the runtime knows about the rank, for evidence."""
        ...


class ProcessRuntime:
    """Ranks as process groups started through each node's transport."""

    kind: Literal["process"] = "process"

    def __init__(self, transports: dict[str, Transport]) -> None:
        self._transports = transports

    def prepare(self, plan: LaunchPlan) -> None:
        """Create workdir, log folder, model parent and cache folders."""
        folders = [plan.workdir, plan.cwd, _log_dir(plan), *plan.cache_dirs.values()]
        self._node(plan.node).run(["mkdir", "-p", "--", *folders], check=True)

    def start(self, plan: LaunchPlan) -> RankHandle:
        """Start the rank detached in its own process group; its log is a file in the workdir."""
        started = datetime.now(UTC)
        stem = f"{_log_dir(plan)}/{started:%Y%m%dT%H%M%S.%f}-rank{plan.rank}"
        log_path, exit_path = f"{stem}.log", f"{stem}.exit"
        argv = ["sh", "-c", _EXIT_WRAPPER, exit_path, *plan.argv]
        pid = self._node(plan.node).start(argv, stdout_path=log_path, env=plan.env, cwd=plan.cwd)
        return RankHandle.started(
            "process", plan, started, pid=pid, log_path=log_path, exit_path=exit_path
        )

    def status(self, handle: RankHandle) -> RankStatus:
        """Alive by pid; otherwise the exit status the wrapper wrote, if any."""
        transport = self._node(handle.node)
        if handle.pid is not None and transport.is_alive(handle.pid):
            return RankStatus(running=True)
        code = None
        if handle.exit_path is not None:
            result = transport.run(["cat", "--", handle.exit_path], timeout=30)
            text = result.stdout.strip()
            code = int(text) if result.ok and text.lstrip("-").isdigit() else None
        return RankStatus(running=False, exit_code=code)

    def read_log(self, handle: RankHandle, offset: int = 0) -> str:
        """Bytes from `offset` on of the rank's log file."""
        if handle.log_path is None:
            return ""
        result = self._node(handle.node).run(
            ["tail", "-c", f"+{offset + 1}", "--", handle.log_path], timeout=60
        )
        return result.stdout if result.ok else ""

    def stop(self, handle: RankHandle) -> RankStatus:
        """Signal the process group, wait the grace period, then SIGKILL the group."""
        transport = self._node(handle.node)
        if handle.pid is None:
            return self.status(handle)
        transport.kill(handle.pid, signal.Signals[handle.plan.stop_signal])
        deadline = time.monotonic() + handle.plan.stop_grace_s
        while time.monotonic() < deadline and transport.is_alive(handle.pid):
            time.sleep(STOP_POLL_S)
        if transport.is_alive(handle.pid):
            transport.kill(handle.pid, signal.SIGKILL)
            _wait_gone(transport, handle.pid)
        return self.status(handle)

    def inspect(self, handle: RankHandle) -> dict[str, Any]:
        """Process table rows of the rank's group plus its status."""
        transport = self._node(handle.node)
        listing = ""
        if handle.pid is not None:
            ps = ["ps", "-o", "pid,stat,etime,rss,args", "-g", str(handle.pid)]
            listing = transport.run(ps, timeout=30).stdout
        return {
            "pid": handle.pid,
            "status": self.status(handle).model_dump(),
            "processes": listing,
            "log_path": handle.log_path,
        }

    def _node(self, name: str) -> Transport:
        try:
            return self._transports[name]
        except KeyError:
            raise TransportError(f"no transport for node {name}") from None


def _log_dir(plan: LaunchPlan) -> str:
    return f"{plan.workdir}/logs"


def _wait_gone(transport: Transport, pid: int, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and transport.is_alive(pid):
        time.sleep(STOP_POLL_S)
