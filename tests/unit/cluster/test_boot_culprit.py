"""Whom a failed boot names when several ranks are gone at the same poll.

Seen in CI (lab TP3, rank 2 crashed in prepare): rank 1 lost its peer and exited within the same
poll, before its last words were read, and the boot named rank 1 with rank 2's crash as a mere
"report". The watcher now reads every rank's last words once a rank is gone, and names a rank
that blames no peer before one that reports losing a peer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flows.cluster.boot.timeline import LogReader
from flows.cluster.boot.watch import _check_ranks, _read_new, _Watch
from flows.cluster.runtime.base import RankHandle, RankStatus
from flows.errors import BootError
from flows.spec.cluster import Cluster
from flows.spec.engine import EngineProfile
from flows.spec.launch import LaunchPlan, render_all
from flows.spec.load import load_model
from flows.spec.release import load_release

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class _Ranks:
    """A runtime double: each rank's log so far and whether it still runs."""

    logs: dict[int, str] = field(default_factory=dict)
    exited: set[int] = field(default_factory=set)

    def status(self, handle: RankHandle) -> RankStatus:
        if handle.rank in self.exited:
            return RankStatus(running=False, exit_code=1)
        return RankStatus(running=True)

    def read_log(self, handle: RankHandle, offset: int = 0) -> str:
        return self.logs.get(handle.rank, "").encode()[offset:].decode()


def _line(event: str, rank: int, **fields: Any) -> str:
    return json.dumps({"ts": "2026-12-04T17:09:36+00:00", "event": event, "rank": rank, **fields})


def _watches() -> list[_Watch]:
    """The three ranks of the bundled TP3 cluster (r1), as the boot loop watches them."""
    cluster = load_model(ROOT / "config/local-tp3.yaml", Cluster)
    profile = load_model(ROOT / "config/engines/sparkengine.yaml", EngineProfile)
    plans = sorted(render_all(cluster, load_release(ROOT / "releases/r1.yaml")), key=_rank)
    handles = [RankHandle.started("process", plan, datetime.now(UTC)) for plan in plans]
    return [_Watch(h, LogReader(profile.logs, node=h.node, rank=h.rank)) for h in handles]


def _rank(plan: LaunchPlan) -> int:
    return plan.rank


def _poll(runtime: _Ranks, watches: list[_Watch], *, late: dict[int, str] | None = None) -> None:
    """One turn of the boot loop: read the logs, then (after `late` lines land) check ranks."""
    _read_new(runtime, watches, None)  # type: ignore[arg-type]
    for rank, text in (late or {}).items():
        runtime.logs[rank] = runtime.logs.get(rank, "") + text
    _check_ranks(runtime, watches, None)  # type: ignore[arg-type]


def _failure(runtime: _Ranks, watches: list[_Watch], *, late: dict[int, str] | None = None) -> str:
    with pytest.raises(BootError) as failure:
        _poll(runtime, watches, late=late)
    return str(failure.value)


def test_the_crashed_rank_is_named_not_the_peer_that_exited_after_it() -> None:
    runtime = _Ranks()
    watches = _watches()
    runtime.logs[2] = _line("fatal", 2, error="InjectedCrash", message="crash in prepare") + "\n"
    runtime.exited = {1, 2}
    # rank 1's last words land between the poll's log read and its status check
    last_words = (
        _line("peer_failure", 1, peer=2, reason="connection closed")
        + "\n"
        + _line("fatal", 1, error="PeerFailureError", message="peer 2 gone")
        + "\n"
    )
    message = _failure(runtime, watches, late={1: last_words})
    assert message.startswith("node local2 rank 2: exited 1 during boot: fatal ")
    assert "InjectedCrash" in message.split(";")[0]
    assert "rank 1 reports peer_failure" in message


def test_a_killed_rank_that_says_nothing_is_named_before_the_peer_that_blames_it() -> None:
    runtime = _Ranks()
    watches = _watches()
    runtime.logs[1] = _line("peer_failure", 1, peer=2, reason="connection closed") + "\n"
    runtime.exited = {1, 2}
    message = _failure(runtime, watches)
    assert message.startswith("node local2 rank 2: exited 1 during boot: last output: (none)")
    assert "rank 1 reports peer_failure" in message


def test_with_nobody_blaming_a_peer_the_lowest_worker_is_named_before_the_head() -> None:
    runtime = _Ranks()
    watches = _watches()
    runtime.exited = {0, 2}
    message = _failure(runtime, watches)
    assert message.startswith("node local2 rank 2: exited 1 during boot")


def test_a_live_head_reporting_a_lost_peer_is_named_when_nothing_has_exited() -> None:
    runtime = _Ranks()
    watches = _watches()
    runtime.logs[0] = _line("collective_failure", 0, peer=1, seq=7, phase="prepare") + "\n"
    message = _failure(runtime, watches)
    assert message.startswith("node local0 rank 0: collective_failure ")


def test_nothing_gone_and_nothing_reported_is_not_a_failure() -> None:
    runtime = _Ranks(logs={0: _line("loaded", 0) + "\n"})
    _poll(runtime, _watches())
