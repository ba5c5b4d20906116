"""A second, real lock holder for the lock attacks: a separate process on the same head folder.

`python lock_holder.py stages LOCK MARKS` holds the lock without heartbeats and passes through
20 stages (as a run does), checking the lock before each the way the pipeline does; it exits 0
when it reached the end, 3 when it was stopped because the lock was taken over.
`python lock_holder.py slow-heartbeat LOCK MARKS` holds the lock, then heartbeats once over a
slow link: every write command waits a second after announcing itself in MARKS, the window in
which another run takes the lock over; it prints whether its heartbeat was refused.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from flows.cluster.ops import lock as lock_module
from flows.cluster.ops.lock import ClusterLock, LockSettings
from flows.cluster.transport import LocalTransport
from flows.cluster.transport.base import CommandResult
from flows.errors import ClusterError

SLOW_COMMANDS = ("mv", "flock")


class SlowLink(LocalTransport):
    """The head over a slow link: a write reaches it a second after it was sent."""

    def __init__(self, marks: Path) -> None:
        super().__init__("head")
        self.marks = marks

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        check: bool = False,
    ) -> CommandResult:
        if argv[0] in SLOW_COMMANDS:
            (self.marks / "writing").write_text(argv[0])
            time.sleep(1.0)
        return super().run(argv, timeout=timeout, env=env, cwd=cwd, check=check)


def stages(path: str, marks: Path) -> int:
    settings = LockSettings(path=path, stale_after_s=0.5, heartbeat_s=3600)
    lock = ClusterLock(LocalTransport("head"), settings, command="first run")
    check = getattr(lock_module, "ensure_held", lambda: None)  # before the fix: never checked
    with lock:
        current = getattr(lock, "current", None)
        with current() if current else _nothing():
            (marks / "held").write_text("held")
            for stage in range(20):
                try:
                    check()
                except ClusterError as error:
                    print(f"stopped at stage {stage}: {error}", file=sys.stderr)
                    return 3
                (marks / "stage").write_text(str(stage))
                time.sleep(0.25)
    return 0


def slow_heartbeat(path: str, marks: Path) -> int:
    settings = LockSettings(path=path, stale_after_s=0.5, heartbeat_s=3600)
    lock = ClusterLock(SlowLink(marks), settings, command="first run")
    lock.acquire()
    (marks / "held").write_text("held")
    while not (marks / "go").exists():
        time.sleep(0.05)
    try:
        lock.heartbeat()
    except ClusterError as error:
        print(f"heartbeat refused: {error}")
    print(f"lost={lock.lost}")
    lock._stop.set()  # leave the lock to its new owner, as a dead run would
    return 0


class _nothing:  # noqa: N801 - a context manager for the run before the fix
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


if __name__ == "__main__":
    mode, lock_path, marks_dir = sys.argv[1:4]
    action = {"stages": stages, "slow-heartbeat": slow_heartbeat}[mode]
    sys.exit(action(lock_path, Path(marks_dir)))
