"""Fault: a partial start. When the head failed to start after its workers did, the workers were
never stopped, no evidence was captured, no session file was written and `cluster stop` found
nothing. Now each rank is remembered the moment it starts (so even a killed driver leaves a file
`cluster stop` finds), and a failed start captures evidence and stops what it started.

The workers are real engine ranks on this machine; only the head's start fails, as when the link
to the head drops between the workers' start and the head's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cluster.boot import session as sessions
from flows.cluster.runtime.base import RankHandle
from flows.cluster.runtime.process import ProcessRuntime
from flows.cluster.transport.local import LocalTransport
from flows.errors import BootError, TransportError
from flows.spec.cluster import Cluster
from flows.spec.launch import LaunchPlan
from flows.spec.release import Release
from tests.support.local_cluster import ensure_models, plans_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class HeadUnreachable(ProcessRuntime):
    """The real process runtime, except that the head's start fails after the workers started."""

    def __init__(self, nodes: dict[str, LocalTransport], state: Path, cluster: str) -> None:
        super().__init__(dict(nodes))
        self.state = state
        self.cluster = cluster
        self.remembered_before_head: list[RankHandle] = []
        self.workers: list[RankHandle] = []

    def start(self, plan: LaunchPlan) -> RankHandle:
        if plan.head:
            left = sessions.load_session(self.state, self.cluster)
            self.remembered_before_head = left.handles if left else []
            raise TransportError(f"{plan.node}: connection lost during `setsid`")
        handle = super().start(plan)
        self.workers.append(handle)
        return handle


def test_head_failing_after_workers_started_leaves_nothing_running(
    local_cluster: Cluster, release_r1: Release, transports: dict[str, LocalTransport],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    plans = plans_for(local_cluster, release_r1)
    ensure_models(plans, release_r1)
    runtime = HeadUnreachable(transports, tmp_path, local_cluster.name)
    prepared = sessions.Prepared(plans=plans, build="sha256:test")
    monkeypatch.setattr(sessions, "runtime_for", lambda *_a, **_k: runtime)
    monkeypatch.setattr(sessions, "prepare_plans", lambda *_a, **_k: prepared)
    try:
        with pytest.raises(BootError, match="stopped 1 rank") as failed:
            sessions.start_release(local_cluster, release_r1, transports, tmp_path)
        assert runtime.workers, "the worker never started"
        # a driver killed at this point would have left the worker findable by `cluster stop`
        assert [h.pid for h in runtime.remembered_before_head] == [h.pid for h in runtime.workers]
        assert all(not runtime.status(h).running for h in runtime.workers), "worker orphaned"
        evidence = list((tmp_path / "evidence" / local_cluster.name).glob("*partial-start*"))
        assert evidence, str(failed.value)
        assert any(evidence[0].rglob("*"))
        assert sessions.load_session(tmp_path, local_cluster.name) is None
    finally:
        for handle in runtime.workers:
            runtime.stop(handle)


def test_a_start_killed_midway_is_found_and_stopped_by_cluster_stop(
    local_cluster: Cluster, release_r1: Release, transports: dict[str, LocalTransport],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    plans = plans_for(local_cluster, release_r1)
    ensure_models(plans, release_r1)
    runtime = HeadUnreachable(transports, tmp_path, local_cluster.name)
    worker = next(plan for plan in plans if not plan.head)
    runtime.prepare(worker)
    handle = ProcessRuntime.start(runtime, worker)  # what a killed driver left running
    try:
        # the file a killed `cluster start` leaves: written when the worker started
        monkeypatch.setattr(sessions, "runtime_for", lambda *_a, **_k: runtime)
        left = sessions.StartingSession(
            cluster=local_cluster.name, release=release_r1.name, runtime="process",
            started_at=handle.started_at, handles=[handle],
        )  # fmt: skip
        path = sessions.starting_file(tmp_path, local_cluster.name)
        path.parent.mkdir(parents=True)
        path.write_text(left.model_dump_json())
        found = sessions.load_session(tmp_path, local_cluster.name)
        assert found is not None
        assert [h.pid for h in found.handles] == [handle.pid]
        sessions.stop_session(local_cluster, found, transports, tmp_path)
        assert not runtime.status(handle).running
        assert sessions.load_session(tmp_path, local_cluster.name) is None
    finally:
        runtime.stop(handle)
