"""Memory guards: a rank is not started, or is killed, when its node runs short of memory.

A GB10 node shares one pool of memory between the CPU and the GPU; a boot that takes more than
the node has leaves it unreachable rather than failing cleanly. The recipe therefore arms a
guard on every node before its container starts and keeps one while it serves
(christopherowen/spark-ds41f `scripts/memguard.sh`, armed by bin/spark `command_cluster_start`):
it refuses to start below the startup threshold, kills the container with SIGKILL when
MemAvailable falls below the threshold of its phase (startup until the API is ready, steady
after), and fails closed when MemAvailable cannot be read. A rank sparkgate starts gets the
same guard here, checked through the node's transport.
"""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Callable

from flows.cluster.transport.base import Transport
from flows.errors import BootError, TransportError
from flows.spec.cluster import MemoryGuard

GIB_KIB = 1024 * 1024
STARTUP_READ_TIMEOUT_S = 30.0
WATCH_READ_TIMEOUT_S = 10.0


def node_meminfo(transport: Transport, timeout_s: float = WATCH_READ_TIMEOUT_S) -> str:
    """The node's /proc/meminfo text, read through its transport (a TransportError when it
    cannot be: the guard then fails closed)."""
    return transport.run(["cat", "/proc/meminfo"], timeout=timeout_s, check=True).stdout


def mem_available_kib(meminfo: str) -> int | None:
    """MemAvailable from /proc/meminfo's text, in KiB (None when absent or unreadable)."""
    for line in meminfo.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "MemAvailable:" and fields[1].isdigit():
            return int(fields[1])
    return None


def shortfall(available_kib: int | None, threshold_gib: float, phase: str) -> str | None:
    """Why the guard stops the rank (None: enough memory)."""
    if available_kib is None:
        return f"cannot read MemAvailable during {phase}; failing closed"
    if available_kib < threshold_gib * GIB_KIB:
        return (
            f"MemAvailable {available_kib / GIB_KIB:.1f} GiB is below the {phase} memory guard "
            f"of {threshold_gib:g} GiB"
        )
    return None


def refuse_below_startup(transport: Transport, settings: MemoryGuard, node: str, rank: int) -> None:
    """BootError when the node is already below the startup memory guard (nothing starts)."""
    meminfo = node_meminfo(transport, STARTUP_READ_TIMEOUT_S)
    reason = shortfall(mem_available_kib(meminfo), settings.startup_gib, "startup")
    if reason is not None:
        raise BootError(f"node {node}: refusing to start rank {rank}: {reason}")


def answers(url: str | None) -> bool:
    """Whether the head's API answers at its readiness URL (the guards turn steady then)."""
    if url is None:
        return False
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 - the cluster's URL
            return bool(answer.status == 200)
    except (OSError, ValueError):
        return False


class RankGuard:
    """One rank's guard: a thread that checks its node's memory and kills the rank when short.

    `read` returns the node's /proc/meminfo text; `kill` stops the rank (SIGKILL, as the
    recipe's guard does); `ready` says whether the head's API answers (startup to steady).
    """

    def __init__(
        self,
        settings: MemoryGuard,
        *,
        read: Callable[[], str],
        kill: Callable[[], None],
        ready: Callable[[], bool],
    ) -> None:
        self._settings = settings
        self._read, self._kill, self._ready = read, kill, ready
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="memory-guard", daemon=True)
        self.phase = "startup"
        self.tripped: str | None = None

    def start(self) -> RankGuard:
        """Begin checking; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop checking (the rank is being stopped on purpose)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def check(self) -> str | None:
        """One check of the current phase; the reason the rank was killed, if it was."""
        if self.phase == "startup" and self._ready():
            self.phase = "steady"
        threshold = (
            self._settings.startup_gib if self.phase == "startup" else self._settings.steady_gib
        )
        try:
            text = self._read()
        except TransportError:
            return None  # the node did not answer this time: the next check asks again
        reason = shortfall(mem_available_kib(text), threshold, self.phase)
        if reason is not None:
            self.tripped = f"killed by the memory guard: {reason}"
            self._kill()
        return reason

    def _watch(self) -> None:
        while not self._stop.is_set():
            if self.check() is not None:
                return
            interval = (
                self._settings.startup_interval_s
                if self.phase == "startup"
                else self._settings.interval_s
            )
            self._stop.wait(interval)
