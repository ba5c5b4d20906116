"""Booting the real engine on a local two-node cluster: timeline, failures, evidence, caches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.cluster.boot.caches import cache_targets, empty_caches
from flows.cluster.boot.watch import boot, stop_all
from flows.cluster.runtime.process import ProcessRuntime
from flows.cluster.transport.local import LocalTransport
from flows.errors import BootError
from flows.spec.cluster import Cluster
from flows.spec.release import Release
from tests.support.local_cluster import ensure_models, plans_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _nothing_running(runtime: ProcessRuntime, handles: list) -> bool:  # type: ignore[type-arg]
    return all(not runtime.status(handle).running for handle in handles)


def test_boot_reads_a_timeline_and_stop_leaves_nothing_running(
    local_cluster: Cluster,
    release_r1: Release,
    transports: dict[str, LocalTransport],
    tmp_path: Path,
) -> None:
    plans = plans_for(local_cluster, release_r1)
    ensure_models(plans, release_r1)
    runtime = ProcessRuntime(dict(transports))
    seen: list[str] = []
    result = boot(
        local_cluster.engine, plans, runtime, transports,
        evidence_root=tmp_path, on_event=lambda event: seen.append(event.name),
    )  # fmt: skip
    try:
        timeline = result.timeline
        assert timeline.ready_s is not None
        assert [rank.rank for rank in timeline.ranks] == [0, 1]
        for rank in timeline.ranks:
            assert rank.kernels
            assert rank.kernels > 0
            assert rank.prepare_s is not None
            assert {"weights_loaded", "kernels_prepared", "rendezvous"} <= set(rank.phases)
        assert "ready" in timeline.ranks[0].phases
        assert timeline.compiles_after_preparation == 0
        assert "ready" in seen
    finally:
        stop_all(runtime, result.handles)
    assert _nothing_running(runtime, result.handles)
    statuses = [runtime.status(handle) for handle in result.handles]
    assert all(status.exit_code is not None for status in statuses), statuses


def test_a_rank_crashing_mid_boot_is_named_with_evidence_and_nothing_left_running(
    local_cluster: Cluster,
    release_r1: Release,
    transports: dict[str, LocalTransport],
    tmp_path: Path,
) -> None:
    plans = plans_for(local_cluster, release_r1, SPARKENGINE_FAULT_CRASH="1@prepare")
    ensure_models(plans, release_r1)
    runtime = ProcessRuntime(dict(transports))
    with pytest.raises(BootError) as failure:
        boot(local_cluster.engine, plans, runtime, transports, evidence_root=tmp_path)
    message = str(failure.value)
    assert "node local1 rank 1" in message
    assert "exited" in message
    evidence = failure.value.evidence
    assert evidence is not None
    assert evidence.is_dir()
    logs = sorted(path.name for path in evidence.glob("*.log"))
    assert logs == ["local0-rank0.log", "local1-rank1.log"]
    assert (evidence / "local1-rank1.launch.json").is_file()
    # each node's kernel journal since the start joins the evidence (this VM keeps none: the
    # file holds journalctl's own words, "-- No entries --")
    journals = sorted(path.name for path in evidence.glob("*.journal.txt"))
    assert journals == ["local0-rank0.journal.txt", "local1-rank1.journal.txt"]
    summary = json.loads((evidence / "summary.json").read_text())
    assert "rank 1" in summary["cause"]
    pids = [int(json.loads(p.read_text())["pid"]) for p in evidence.glob("*.inspect.json")]
    assert len(pids) == 2
    assert all(not transports["local0"].is_alive(pid) for pid in pids)


def test_one_rank_cold_kernel_cache_compiles_only_on_that_rank(
    local_cluster: Cluster,
    release_r1: Release,
    transports: dict[str, LocalTransport],
    tmp_path: Path,
) -> None:
    plans = plans_for(local_cluster, release_r1)
    ensure_models(plans, release_r1)
    runtime = ProcessRuntime(dict(transports))
    warm = boot(local_cluster.engine, plans, runtime, transports, evidence_root=tmp_path)
    stop_all(runtime, warm.handles)
    empty_caches(transports, cache_targets(plans, "one-rank-kernels"))
    cold = boot(local_cluster.engine, plans, runtime, transports, evidence_root=tmp_path)
    stop_all(runtime, cold.handles)
    by_rank = {rank.rank: rank for rank in cold.timeline.ranks}
    assert by_rank[0].compiled == 0
    assert by_rank[1].compiled is not None
    assert by_rank[1].compiled > 0
    assert by_rank[1].cached is not None
    assert by_rank[1].cached < (by_rank[1].kernels or 0)
