"""Attack: two runs drive one cluster. A live holder whose lock was taken over as stale never
read its `lost` flag and kept running, and its heartbeat's read-then-`mv -f` could overwrite the
new owner's lock. Now every stage checks the lock and stops a run that lost it, and every change
of the lock is a compare-and-swap on the node. Both holders are real processes on one folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from flows.cluster.ops.lock import ClusterLock, LockSettings, read_lock
from flows.cluster.transport import LocalTransport

HOLDER = Path(__file__).with_name("lock_holder.py")
ROOT = Path(__file__).resolve().parents[2]


def start_holder(mode: str, lock: Path, marks: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'engine'}"}
    return subprocess.Popen(
        [sys.executable, str(HOLDER), mode, str(lock), str(marks)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def wait_for(path: Path, holder: subprocess.Popen[str], limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while not path.exists():
        assert holder.poll() is None, holder.communicate()
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def take_over(lock: Path, command: str) -> ClusterLock:
    """The second run: the first one's heartbeat looks stale, so it takes the lock."""
    settings = LockSettings(path=str(lock), stale_after_s=0.5, heartbeat_s=3600)
    taker = ClusterLock(LocalTransport("head"), settings, command=command)
    deadline = time.monotonic() + 10
    while True:
        try:
            taker.acquire()
            return taker
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_lock_taken_over_stops_the_holder_at_its_next_stage(tmp_path: Path) -> None:
    lock, marks = tmp_path / "head" / "sparkgate.lock", tmp_path / "marks"
    lock.parent.mkdir()
    marks.mkdir()
    first = start_holder("stages", lock, marks)
    try:
        wait_for(marks / "stage", first)
        second = take_over(lock, "second run")
        try:
            out, err = first.communicate(timeout=30)
            assert first.returncode == 3, f"the first run kept driving the cluster: {out}{err}"
            assert "taken over" in err
            assert "second run" in err
            current = read_lock(LocalTransport("head"), str(lock))
            assert current is not None
            assert current.command == "second run"  # the loser did not remove the new lock
        finally:
            second.release()
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate()


def test_slow_heartbeat_never_overwrites_the_new_owner(tmp_path: Path) -> None:
    lock, marks = tmp_path / "head" / "sparkgate.lock", tmp_path / "marks"
    lock.parent.mkdir()
    marks.mkdir()
    first = start_holder("slow-heartbeat", lock, marks)
    try:
        wait_for(marks / "held", first)
        time.sleep(0.6)  # the first run's heartbeat is now stale
        (marks / "go").write_text("go")
        wait_for(marks / "writing", first)  # its heartbeat's write is on the wire
        second = take_over(lock, "second run")
        try:
            out, err = first.communicate(timeout=30)
            assert first.returncode == 0, err
            current = read_lock(LocalTransport("head"), str(lock))
            assert current is not None
            assert current.command == "second run", "a stale heartbeat overwrote the new owner"
            assert second.record is not None
            assert current.token == second.record.token
            assert "lost=True" in out
            assert "heartbeat refused" in out
        finally:
            second.release()
        assert not lock.exists()
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate()
