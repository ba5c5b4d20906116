"""The rank containers a recipe cluster gets, checked on the final options docker receives.

Issue 26: the recipe's display device must survive the merge of run arguments and mounts
(items 2), a stopped container sparkgate did not make is never removed (item 11).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from docker.errors import NotFound

from flows.cluster.runtime.containers import (
    LABEL,
    RankContainer,
    create_options,
    run_once,
    run_rank,
)
from flows.cluster.runtime.docker import rank_container
from flows.errors import BootError
from flows.spec.cluster import Cluster
from flows.spec.launch import render_all
from flows.spec.load import load_model
from flows.spec.release import Release

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "examples" / "spark-ds41f"
DISPLAY = "/dev/dri/card0"


@pytest.fixture
def triangle() -> Cluster:
    return load_model(RECIPE / "clusters" / "tp3-triangle.yaml", Cluster)


@pytest.fixture
def r6x() -> Release:
    return load_model(RECIPE / "releases" / "r6x.yaml", Release)


def final_options(cluster: Cluster, release: Release, rank: int) -> dict[str, Any]:
    plan = render_all(cluster, release)[rank]
    return create_options(rank_container(cluster, release, cluster.node(plan.node), plan, "i"))


def test_every_rank_container_keeps_the_display_device_beside_the_cluster_mounts(
    triangle: Cluster, r6x: Release
) -> None:
    for rank in range(3):
        options = final_options(triangle, r6x, rank)
        targets = [mount["Target"] for mount in options["mounts"]]
        assert DISPLAY in targets, f"rank {rank}: the display device was dropped"
        assert {"/models", "/blobs", "/cache"} <= set(targets)  # and the cluster's own
        assert options["device_cgroup_rules"] == ["c 226:* rw"]


class FakeApi:
    """One container named `name` with the given labels and state; records removals."""

    def __init__(self, labels: dict[str, str], running: bool = False) -> None:
        self.labels, self.running, self.removed = labels, running, False

    def inspect_container(self, name: str) -> dict[str, Any]:
        if self.removed:
            raise NotFound("gone")
        return {
            "Id": "c0ffee", "Name": f"/{name}", "State": {"Running": self.running},
            "Config": {"Labels": self.labels},
        }  # fmt: skip

    def remove_container(self, name: str, force: bool) -> None:
        self.removed = True


class FakeContainers:
    def create(self, **options: Any) -> Any:
        raise AssertionError("nothing may be created over the operator's container")


class FakeClient:
    def __init__(self, api: FakeApi) -> None:
        self.api, self.containers = api, FakeContainers()


SPEC = RankContainer(
    cluster="spark-triangle", node="dgx1", rank=0, image="i", name="dsv41-karmic-kraken",
    argv=("vllm", "serve"),
)  # fmt: skip


@pytest.mark.parametrize("start", [run_rank, lambda client, spec: run_once(client, spec, 1.0)])
def test_a_stopped_container_sparkgate_did_not_make_is_refused_and_kept(start: Any) -> None:
    api = FakeApi(labels={"maintainer": "recipe"})  # the recipe's stopped production container
    with pytest.raises(BootError, match="not created by sparkgate") as raised:
        start(FakeClient(api), SPEC)
    assert "dsv41-karmic-kraken" in str(raised.value)
    assert not api.removed


def test_a_stopped_container_of_sparkgate_is_replaced() -> None:
    api = FakeApi(labels={LABEL: "rank"})
    with pytest.raises(AssertionError, match="nothing may be created"):
        run_rank(FakeClient(api), SPEC)  # got as far as creating the new one
    assert api.removed
