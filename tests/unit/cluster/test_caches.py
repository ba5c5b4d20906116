"""Cold-boot modes empty exactly the cache folders they name, and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cluster.boot.caches import cache_targets, empty_caches, parse_target
from flows.cluster.transport.local import LocalTransport
from flows.errors import ClusterError
from flows.spec.launch import LaunchPlan


def _plan(rank: int, root: str = "/srv/sg") -> LaunchPlan:
    workdir = f"{root}/node{rank}"
    return LaunchPlan(
        node=f"node{rank}",
        rank=rank,
        head=rank == 0,
        address="127.0.0.1",
        argv=["engine"],
        env={},
        cwd=workdir,
        workdir=workdir,
        model_dir=f"{workdir}/model",
        cache_dirs={"kernels": f"{workdir}/cache/kernels", "jit": f"{workdir}/cache/jit"},
        kernel_cache="kernels",
        ready_url=None,
        stop_signal="SIGTERM",
        stop_grace_s=1.0,
    )


PLANS = [_plan(0), _plan(1), _plan(2)]


def test_warm_empties_nothing() -> None:
    assert cache_targets(PLANS, "warm") == []


def test_one_rank_defaults_to_the_last_rank_kernel_cache() -> None:
    targets = cache_targets(PLANS, "one-rank-kernels")
    assert [(t.node, t.kind) for t in targets] == [("node2", "kernels")]
    chosen = cache_targets(PLANS, "one-rank-kernels", rank=1)
    assert [(t.node, t.kind) for t in chosen] == [("node1", "kernels")]


def test_one_rank_with_a_missing_rank_is_an_error() -> None:
    with pytest.raises(ClusterError, match="no rank 7"):
        cache_targets(PLANS, "one-rank-kernels", rank=7)


def test_all_kernels_and_all_jit() -> None:
    kernels = cache_targets(PLANS, "all-kernels")
    assert {(t.node, t.kind) for t in kernels} == {(f"node{r}", "kernels") for r in range(3)}
    everything = cache_targets(PLANS, "all-jit")
    assert len(everything) == 6
    assert {t.kind for t in everything} == {"kernels", "jit"}


def test_parse_target_kind_and_node() -> None:
    assert len(parse_target("jit", PLANS)) == 3
    assert [t.node for t in parse_target("kernels@node1", PLANS)] == ["node1"]
    with pytest.raises(ClusterError, match="no cache kind 'triton'"):
        parse_target("triton", PLANS)
    with pytest.raises(ClusterError, match="no node 'nodeX'"):
        parse_target("jit@nodeX", PLANS)


def test_empty_caches_removes_contents_of_the_target_only(tmp_path: Path) -> None:
    plans = [_plan(0, str(tmp_path)), _plan(1, str(tmp_path))]
    for plan in plans:
        for path in plan.cache_dirs.values():
            folder = tmp_path / path.removeprefix(f"{tmp_path}/")
            folder.mkdir(parents=True)
            (folder / "entry.bin").write_bytes(b"x" * 10)
    transports = {p.node: LocalTransport(p.node) for p in plans}
    empty_caches(transports, cache_targets(plans, "one-rank-kernels"))
    assert not any((tmp_path / "node1/cache/kernels").iterdir())
    assert (tmp_path / "node1/cache/jit/entry.bin").exists()
    assert (tmp_path / "node0/cache/kernels/entry.bin").exists()


def test_refuses_to_empty_a_shallow_or_relative_path() -> None:
    plan = _plan(0).model_copy(update={"cache_dirs": {"kernels": "/", "jit": "cache/jit"}})
    transports = {"node0": LocalTransport("node0")}
    with pytest.raises(ClusterError, match="refusing to empty"):
        empty_caches(transports, cache_targets([plan], "all-jit"))
