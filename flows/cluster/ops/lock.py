"""The cluster lock: one qualification per cluster at a time, held in a file on the head node.

The lock file is JSON (holder, host, pid, command, since, heartbeat, token). It is created
atomically with `ln TEMP LOCK` on the node (a hard link fails when the name exists, and the
content is complete before the name appears), so two runs can never both believe they hold it.
A heartbeat thread refreshes the timestamp; a lock whose heartbeat is older than `stale_after_s`
belongs to a run that died and may be taken over, with a warning. Staleness is judged with this
machine's UTC clock; preflight checks clock skew between nodes.

Every change of an existing lock (heartbeat, stale takeover, release, forced unlock) is a
compare-and-swap done on the node in one command: under `flock` on the lock's folder, the new
content is renamed over the lock only while the lock still carries the expected token. So a
holder whose lock was taken over can never overwrite the new owner's lock; its heartbeat fails,
marks the lock lost, and the run's stages (`ensure_held`) stop it with LockLostError. Without
`flock` on the head none of that could run (yet `ln` would still take the lock, which then could
never be refreshed or released), so taking the lock first checks that the head has it, and
preflight reports it.
"""

from __future__ import annotations

import getpass
import logging
import os
import shlex
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import PurePosixPath
from types import TracebackType

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flows.cluster.transport.base import Transport
from flows.errors import ClusterError, LockHeldError, LockLostError
from flows.spec.cluster import Cluster

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

C_LOCALE = {"LC_ALL": "C"}
"""Commands whose stderr we match speak English on every node."""


def utc_now() -> datetime:
    """The default clock."""
    return datetime.now(UTC)


class LockRecord(BaseModel):
    """Who holds the cluster, since when, and when they last proved to be alive."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    holder: str
    host: str
    pid: int
    command: str
    since: datetime
    heartbeat: datetime
    token: str = Field(description="random id of one acquisition; only its owner releases")

    def age_s(self, now: datetime) -> float:
        """Seconds since the last heartbeat."""
        return (now - self.heartbeat).total_seconds()

    def describe(self, now: datetime) -> str:
        """One line naming the holder, for errors and `cluster unlock`."""
        return (
            f"{self.holder} on {self.host} (pid {self.pid}) running `{self.command}` "
            f"since {self.since.isoformat(timespec='seconds')}, "
            f"last heartbeat {self.age_s(now):.0f} s ago"
        )


class LockSettings(BaseModel):
    """Where the lock lives and how liveness is judged."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    stale_after_s: float = Field(default=300.0, gt=0)
    heartbeat_s: float = Field(default=30.0, gt=0)


LOCK_FILE = "sparkgate.lock"
GUARD_WAIT_S = 30
NOT_OURS = 3  # exit status of a swap or removal refused because the lock names someone else

# $1 lock, $2 new content (a temp file), $3 the expected `"token":"..."`: replace or refuse.
_SWAP = (
    'if [ -e "$1" ] && grep -qF -- "$3" "$1"; then exec mv -f -- "$2" "$1"; fi\n'
    f'rm -f -- "$2"\nexit {NOT_OURS}'
)
# $1 lock, $2 the expected `"token":"..."` (empty: any holder): remove or refuse.
_REMOVE = (
    'if [ ! -e "$1" ]; then exit 0; fi\n'
    'if [ -z "$2" ] || grep -qF -- "$2" "$1"; then exec rm -f -- "$1"; fi\n'
    f"exit {NOT_OURS}"
)

_CURRENT: ContextVar[ClusterLock | None] = ContextVar("sparkgate_cluster_lock", default=None)


def lock_settings(cluster: Cluster) -> LockSettings:
    """The lock of a cluster: `sparkgate.lock` in the head's state folder (outside its workdir,
    which may be the operator's checkout), heartbeats well inside the staleness limit."""
    stale = cluster.lock.stale_after_s
    path = str(PurePosixPath(cluster.head.state_folder) / LOCK_FILE)
    return LockSettings(path=path, stale_after_s=stale, heartbeat_s=min(30.0, stale / 4))


def _this_process_record(command: str, now: datetime) -> LockRecord:
    return LockRecord(
        holder=getpass.getuser(),
        host=socket.gethostname(),
        pid=os.getpid(),
        command=command,
        since=now,
        heartbeat=now,
        token=uuid.uuid4().hex,
    )


def read_lock(transport: Transport, path: str) -> LockRecord | None:
    """The current lock record, or None when the cluster is not locked."""
    probe = transport.run(["cat", "--", path], timeout=30, env=C_LOCALE)
    if not probe.ok:
        if "No such file" in probe.stderr:
            return None
        probe.check()
    try:
        return LockRecord.model_validate_json(probe.stdout)
    except ValidationError as error:
        raise ClusterError(
            f"{transport.node}: lock file {path} is unreadable ({error.errors()[0]['msg']}); "
            "inspect it, then `sparkgate cluster unlock --force`"
        ) from error


FLOCK_MISSING = (
    "flock is missing; the cluster lock is changed only under flock on the head node "
    "(install util-linux)"
)


def has_flock(transport: Transport) -> bool:
    """Whether `flock` can run on the node (TransportError when the node cannot be reached)."""
    found = transport.run(["sh", "-c", "command -v flock"], timeout=30, env=C_LOCALE)
    return found.ok and bool(found.stdout.strip())


def require_flock(transport: Transport) -> None:
    """ClusterError naming the node when it lacks `flock`, before the lock is touched."""
    if not has_flock(transport):
        raise ClusterError(f"{transport.node}: {FLOCK_MISSING}")


def _needle(token: str) -> str:
    """How a token appears in the lock's JSON (tokens are hex: nothing to escape)."""
    return f'"token":"{token}"'


def _guarded(transport: Transport, path: str, script: str, *args: str) -> bool:
    """Run a compare-and-swap script under flock on the lock's folder; False when refused."""
    folder = str(PurePosixPath(path).parent)
    argv = ["flock", "-w", str(GUARD_WAIT_S), folder, "sh", "-c", script, "sh", path, *args]
    result = transport.run(argv, timeout=GUARD_WAIT_S + 30)
    if result.rc == NOT_OURS:
        return False
    result.check()
    return True


def force_unlock(transport: Transport, path: str) -> LockRecord | None:
    """Remove the lock whoever holds it; return what was removed (for the message)."""
    record = read_lock(transport, path)
    _guarded(transport, path, _REMOVE, "")
    return record


def ensure_held() -> None:
    """Raise LockLostError when the cluster lock this run holds was taken over.

    Stages call this before they start, so a run whose lock was judged stale and taken by
    another run stops before it drives the cluster again. A no-op outside a held lock.
    """
    lock = _CURRENT.get()
    if lock is not None:
        lock.ensure_held()


class ClusterLock:
    """Acquire, heartbeat and release the lock; also a context manager."""

    def __init__(
        self,
        transport: Transport,
        settings: LockSettings,
        *,
        command: str | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self.transport = transport
        self.settings = settings
        self.command = command or shlex.join(["sparkgate", *sys.argv[1:]])
        self.clock = clock
        self.record: LockRecord | None = None
        self.lost = False
        self.taken_by: LockRecord | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- acquire ----------------------------------------------------------------------------

    def acquire(self) -> LockRecord:
        """Take the lock, or raise LockHeldError naming the live holder (ClusterError when the
        head lacks `flock`: a lock it could never refresh or release is not taken)."""
        require_flock(self.transport)
        mine = _this_process_record(self.command, self.clock())
        if self._link(mine):
            return self._held(mine)
        current = read_lock(self.transport, self.settings.path)
        if current is None:  # released between our attempt and the read: try once more
            if self._link(mine):
                return self._held(mine)
            current = read_lock(self.transport, self.settings.path)
        now = self.clock()
        if current is not None and current.age_s(now) <= self.settings.stale_after_s:
            raise LockHeldError(
                f"cluster is locked by {current.describe(now)}; wait for it, or if that run is "
                "gone run `sparkgate cluster unlock --force`"
            )
        if current is not None:
            log.warning(
                "taking over a stale cluster lock held by %s (stale after %g s)",
                current.describe(now),
                self.settings.stale_after_s,
            )
            if self._swap(mine, expected=current.token):
                return self._held(mine)
        if self._link(mine):
            return self._held(mine)
        winner = read_lock(self.transport, self.settings.path)
        raise LockHeldError(
            "cluster lock was taken by "
            + (winner.describe(self.clock()) if winner else "another run")
            + " at the same moment"
        )

    def _temp_path(self, record: LockRecord) -> str:
        return f"{self.settings.path}.{record.token}.tmp"

    def _write_temp(self, record: LockRecord) -> str:
        temporary = self._temp_path(record)
        directory = str(PurePosixPath(self.settings.path).parent)
        self.transport.run(["mkdir", "-p", "--", directory], timeout=30, check=True)
        self.transport.write_text(temporary, record.model_dump_json())
        return temporary

    def _link(self, record: LockRecord) -> bool:
        """Atomically publish record as the lock; False when a lock already exists."""
        temporary = self._write_temp(record)
        try:
            linked = self.transport.run(
                ["ln", "--", temporary, self.settings.path], timeout=30, env=C_LOCALE
            )
        finally:
            self.transport.run(["rm", "-f", "--", temporary], timeout=30)
        if linked.ok:
            return True
        if "exists" in linked.stderr:
            return False
        linked.check()
        return False

    def _swap(self, record: LockRecord, *, expected: str) -> bool:
        """Replace the lock by record only while it still carries token `expected`."""
        temporary = self._write_temp(record)
        return _guarded(self.transport, self.settings.path, _SWAP, temporary, _needle(expected))

    def _held(self, record: LockRecord) -> LockRecord:
        self.record = record
        self.lost = False
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._beat, name=f"lock-heartbeat-{self.transport.node}", daemon=True
        )
        self._thread.start()
        return record

    # -- heartbeat --------------------------------------------------------------------------

    def heartbeat(self) -> None:
        """Refresh our heartbeat (compare-and-swap); LockLostError when the lock is not ours."""
        if self.record is None:
            return
        if self.lost:
            raise self._lost_error()
        fresh = self.record.model_copy(update={"heartbeat": self.clock()})
        if not self._swap(fresh, expected=self.record.token):
            self._mark_lost()
            raise self._lost_error()
        self.record = fresh

    def _beat(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_s):
            try:
                self.heartbeat()
            except LockLostError:
                return
            except (ClusterError, OSError) as error:
                log.warning("cluster lock heartbeat failed: %s", error)

    def _mark_lost(self) -> None:
        if self.lost:
            return
        self.lost = True
        try:
            self.taken_by = read_lock(self.transport, self.settings.path)
        except (ClusterError, OSError):
            self.taken_by = None
        log.error("%s", self._lost_error())

    def _lost_error(self) -> LockLostError:
        who = (
            self.taken_by.describe(self.clock())
            if self.taken_by is not None
            else "nobody (removed)"
        )
        return LockLostError(
            f"the cluster lock of this run (`{self.command}`) was taken over; it is now held by "
            f"{who}. This run stops so that two runs never drive one cluster"
        )

    def ensure_held(self) -> None:
        """Check on the node that the lock is still ours; LockLostError when it is not."""
        if self.record is None:
            raise LockLostError(f"`{self.command}` does not hold the cluster lock")
        if not self.lost:
            current = read_lock(self.transport, self.settings.path)
            if current is None or current.token != self.record.token:
                self._mark_lost()
        if self.lost:
            raise self._lost_error()

    @contextmanager
    def current(self) -> Iterator[ClusterLock]:
        """Make this lock the one `ensure_held()` checks in this context."""
        reset = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(reset)

    # -- release ----------------------------------------------------------------------------

    def release(self) -> None:
        """Stop the heartbeat and remove the lock if it is still ours (compare-and-remove)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.record is None:
            return
        if not _guarded(self.transport, self.settings.path, _REMOVE, _needle(self.record.token)):
            log.warning("cluster lock was no longer ours at release; left it to its holder")
        self.record = None

    def __enter__(self) -> LockRecord:
        return self.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
