"""The lock's compare-and-swap over SSH: two holders on separate connections to one lab host.

A holder whose lock was taken over as stale is refused at its next heartbeat (it raises and
marks the lock lost), its stage check stops it, and its release leaves the new owner's lock.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flows.cluster.ops.lock import ClusterLock, LockSettings, read_lock
from flows.errors import LockLostError
from tests.support.lab import Lab

pytestmark = pytest.mark.lab


def test_taken_over_holder_is_refused_over_ssh(lab: Lab, tmp_path: Path) -> None:
    settings = LockSettings(path=str(tmp_path / "head" / "sparkgate.lock"), stale_after_s=0.5,
                            heartbeat_s=3600)  # fmt: skip
    first_link, second_link = lab.transport(0), lab.transport(0)
    try:
        first = ClusterLock(first_link, settings, command="first run")
        first.acquire()
        time.sleep(0.7)  # its heartbeat is now stale
        second = ClusterLock(second_link, settings, command="second run")
        second.acquire()
        with pytest.raises(LockLostError, match="second run"):
            first.heartbeat()
        with pytest.raises(LockLostError), first.current():
            first.ensure_held()
        first.release()
        current = read_lock(second_link, settings.path)
        assert current is not None
        assert current.command == "second run"
        second.heartbeat()  # the owner's own compare-and-swap succeeds
        second.release()
        assert read_lock(second_link, settings.path) is None
    finally:
        first_link.close()
        second_link.close()
