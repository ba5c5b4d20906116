"""The cluster lock admits one holder, names it to others, heartbeats, and expires when stale."""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from flows.cluster.ops.lock import ClusterLock, LockSettings, force_unlock, read_lock
from flows.cluster.transport import LocalTransport
from flows.errors import ClusterError, LockHeldError, LockLostError


class FakeClock:
    """A settable UTC clock, so staleness is decided without waiting."""

    def __init__(self) -> None:
        self.now = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def settings(tmp_path: Path, **extra: float) -> LockSettings:
    return LockSettings(path=str(tmp_path / "head" / "sparkgate.lock"), **extra)


def test_acquire_writes_record_and_release_removes_it(tmp_path: Path) -> None:
    lock = ClusterLock(LocalTransport("head"), settings(tmp_path), command="sparkgate qualify r2")
    record = lock.acquire()
    on_disk = json.loads(Path(settings(tmp_path).path).read_text())
    assert on_disk["command"] == "sparkgate qualify r2"
    assert on_disk["token"] == record.token
    assert set(on_disk) == {"holder", "host", "pid", "command", "since", "heartbeat", "token"}
    lock.release()
    assert not Path(settings(tmp_path).path).exists()
    assert sorted(p.name for p in (tmp_path / "head").iterdir()) == []


def test_second_acquire_is_refused_naming_the_holder(tmp_path: Path) -> None:
    transport = LocalTransport("head")
    with ClusterLock(transport, settings(tmp_path), command="sparkgate qualify releases/r2.yaml"):
        other = ClusterLock(transport, settings(tmp_path), command="sparkgate cluster start r1")
        with pytest.raises(LockHeldError, match=r"qualify releases/r2\.yaml") as refused:
            other.acquire()
        assert "unlock --force" in str(refused.value)
        assert other.record is None
    assert read_lock(transport, settings(tmp_path).path) is None


def test_stale_lock_is_taken_over_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    transport = LocalTransport("head")
    config = settings(tmp_path, stale_after_s=60, heartbeat_s=3600)
    dead = ClusterLock(transport, config, command="crashed run", clock=clock)
    dead.acquire()
    dead._stop.set()  # the holder died: no more heartbeats
    clock.advance(30)
    with pytest.raises(LockHeldError, match="crashed run"):
        ClusterLock(transport, config, command="new run", clock=clock).acquire()
    clock.advance(31)
    with caplog.at_level(logging.WARNING):
        record = ClusterLock(transport, config, command="new run", clock=clock).acquire()
    assert "taking over a stale cluster lock" in caplog.text
    assert "crashed run" in caplog.text
    current = read_lock(transport, config.path)
    assert current is not None
    assert current.token == record.token
    assert current.command == "new run"


def test_heartbeat_keeps_a_long_run_fresh(tmp_path: Path) -> None:
    clock = FakeClock()
    transport = LocalTransport("head")
    config = settings(tmp_path, stale_after_s=60, heartbeat_s=3600)
    holder = ClusterLock(transport, config, command="long run", clock=clock)
    holder.acquire()
    try:
        for _ in range(5):
            clock.advance(50)
            holder.heartbeat()
        current = read_lock(transport, config.path)
        assert current is not None
        assert current.heartbeat == clock.now
        with pytest.raises(LockHeldError, match="long run"):
            ClusterLock(transport, config, command="other", clock=clock).acquire()
    finally:
        holder.release()


def test_heartbeat_thread_refreshes(tmp_path: Path) -> None:
    transport = LocalTransport("head")
    config = settings(tmp_path, heartbeat_s=0.05)
    holder = ClusterLock(transport, config, command="run")
    first = holder.acquire()
    try:
        event = threading.Event()
        for _ in range(200):
            current = read_lock(transport, config.path)
            if current is not None and current.heartbeat > first.heartbeat:
                break
            event.wait(0.05)
        assert current is not None
        assert current.heartbeat > first.heartbeat
    finally:
        holder.release()


def test_lost_lock_is_noticed_and_not_removed_on_release(tmp_path: Path) -> None:
    transport = LocalTransport("head")
    config = settings(tmp_path, heartbeat_s=3600)
    first = ClusterLock(transport, config, command="first")
    first.acquire()
    force_unlock(transport, config.path)
    second = ClusterLock(transport, config, command="second")
    second.acquire()
    with pytest.raises(LockLostError, match=r"held by .*second"):
        first.heartbeat()
    assert first.lost
    first.release()
    current = read_lock(transport, config.path)
    assert current is not None
    assert current.command == "second"
    second.release()


def test_force_unlock_returns_the_removed_holder(tmp_path: Path) -> None:
    transport = LocalTransport("head")
    config = settings(tmp_path, heartbeat_s=3600)
    ClusterLock(transport, config, command="forgotten").acquire()
    removed = force_unlock(transport, config.path)
    assert removed is not None
    assert removed.command == "forgotten"
    assert force_unlock(transport, config.path) is None


def test_only_one_of_many_concurrent_acquirers_wins(tmp_path: Path) -> None:
    transport = LocalTransport("head")
    config = settings(tmp_path, heartbeat_s=3600)
    outcomes: list[str] = []
    barrier = threading.Barrier(6)

    def contend(index: int) -> None:
        barrier.wait()
        try:
            ClusterLock(transport, config, command=f"run {index}").acquire()
            outcomes.append("won")
        except LockHeldError:
            outcomes.append("refused")

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["refused"] * 5 + ["won"]


def test_corrupt_lock_file_is_a_clear_error(tmp_path: Path) -> None:
    config = settings(tmp_path)
    Path(config.path).parent.mkdir()
    Path(config.path).write_text("not json")
    with pytest.raises(ClusterError, match=r"unreadable.*unlock --force"):
        ClusterLock(LocalTransport("head"), config).acquire()
