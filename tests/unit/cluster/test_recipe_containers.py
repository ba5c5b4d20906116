"""The rank containers a recipe cluster gets, checked on the final options docker receives.

Issue 26: the recipe's display device must survive the merge of run arguments and mounts
(items 2), a stopped container sparkgate did not make is never removed (item 11).
"""

from __future__ import annotations

import itertools
import json
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
from flows.cluster.runtime.docker import check_entrypoint, rank_container
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
        # The example creates ranks as the recipe's docker run does: its mounts are binds.
        binds = [bind.split(":")[1] for bind in options.get("volumes", [])]
        assert {"/models", "/blobs", "/cache"} <= set(targets + binds)  # and the cluster's own
        assert options["device_cgroup_rules"] == ["c 226:* rw"]


def test_a_cluster_creating_ranks_sparkgates_way_keeps_the_display_device_too(
    triangle: Cluster, r6x: Release
) -> None:
    """Issue 26 item 2 where it bites: with `create_as: sparkgate` the cluster's mounts are
    `mounts`, like the run arguments' `--mount`, and a plain merge replaced the display's."""
    runtime = triangle.runtime.model_copy(update={"create_as": "sparkgate"})
    ours = triangle.model_copy(update={"runtime": runtime})
    for rank in range(3):
        targets = [mount["Target"] for mount in final_options(ours, r6x, rank)["mounts"]]
        assert DISPLAY in targets, f"rank {rank}: the display device was dropped"
        assert {"/models", "/blobs", "/cache"} <= set(targets)


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


# -- deploy parity (item 12) --------------------------------------------------------------------
# The recipe's launcher, from christopherowen/spark-ds41f bin/spark: `rendered_docker_command`
# is `docker run -d --name NAME <docker_run_args> --env K=V (sorted) --volume SRC:DST:MODE
# IMAGE <expected_command>`, and `expected_command` is serve_args then `--node-rank R
# --master-addr A --master-port P`, plus `--headless` on a worker. `doctor --live` compares
# Config.Cmd with expected_command, HostConfig.Binds with the --volume values (extra, missing
# or different mounts), and Config.Env with the environment (no extra variable).

RECIPE_CONFIG: dict[str, Any] = {  # config/cluster.json's shape, values of the example cluster
    "container": {
        "name": "dsv41-karmic-kraken",
        "image": "vllm-ds41f-kkref:19f2c20ed4d6-r6x",
        "docker_run_args": [
            "--network=host", "--ipc=host", "--shm-size=16g",
            "--mount=type=bind,source=/dev/dri/by-path/pci-000f:01:00.0-card,target=/dev/dri/card0",
        ],
        "mounts": [
            ["{home}/.cache/huggingface/hub/snapshots/1bae0e10", "/models", "ro"],
            ["{home}/projects/spark-ds41f/cache", "/cache", "rw"],
        ],
    },
    "host": {"home": "/home/swank"},
    "serve_args": ["/models", "--port", "8000", "--tensor-parallel-size", "3"],
    "environment": {
        "HF_HUB_OFFLINE": "1", "NCCL_IB_GID_INDEX": "3",
        "TRITON_CACHE_DIR": "/cache/kkref/jit/triton",
    },
    "distributed": {"master_addr": "10.0.1.71", "master_port": "9999"},
}  # fmt: skip


def recipe_run(
    config: dict[str, Any], rank: int, head: bool, node_env: dict[str, str]
) -> list[str]:
    """bin/spark's rendered_docker_command for one node (the facts above, rewritten); its
    environment is the cluster's plus the node's fabric variables, which the recipe renders
    from its topology (`topology.node_environment`) and the example keeps in node overrides."""
    container, home = config["container"], config["host"]["home"]
    command = [*config["serve_args"], "--node-rank", str(rank)]
    command += ["--master-addr", config["distributed"]["master_addr"]]
    command += ["--master-port", config["distributed"]["master_port"]]
    command += [] if head else ["--headless"]
    argv = ["docker", "run", "-d", "--name", container["name"], *container["docker_run_args"]]
    for key, value in sorted({**config["environment"], **node_env}.items()):
        argv += ["--env", f"{key}={value}"]
    for source, target, mode in container["mounts"]:
        argv += ["--volume", f"{source.format(home=home)}:{target}:{mode}"]
    return [*argv, container["image"], *command]


def what_doctor_reads(run: list[str]) -> dict[str, Any]:
    """From a `docker run` argv: what inspect shows and the recipe's doctor compares."""
    image_at = run.index(RECIPE_CONFIG["container"]["image"])
    flags, binds, env = run[:image_at], [], {}
    for flag, value in itertools.pairwise(flags):
        if flag == "--volume":
            binds.append(value)
        elif flag == "--env":
            key, _, item = value.partition("=")
            env[key] = item
    return {"Cmd": run[image_at + 1 :], "Binds": binds, "Env": env, "Image": run[image_at]}


def sparkgate_triangle(tmp_path: Path) -> tuple[Cluster, Release]:
    """The same cluster as a sparkgate cluster file (docker-run parity) over the recipe's
    vLLM profile, its argv and environment replaced by RECIPE_CONFIG's."""
    argv = ["vllm", "serve", *RECIPE_CONFIG["serve_args"], "--node-rank", "{rank}",
            "--master-addr", "{head_address}", "--master-port", "{rendezvous_port}"]  # fmt: skip
    cluster = {
        "kind": "cluster",
        "extends": str(RECIPE / "clusters" / "tp3-triangle.yaml"),
        "unset": ["engine.launch.env", "runtime.run_args", "runtime.mounts"],
        "set": {
            "runtime": {
                "create_as": "docker-run",
                "image_entrypoint": ["vllm", "serve"],
                "run_args": RECIPE_CONFIG["container"]["docker_run_args"],
                "mounts": [
                    {"source": s.format(home="/home/swank"), "target": t, "mode": m}
                    for s, t, m in RECIPE_CONFIG["container"]["mounts"]
                ],
            },
            "engine": {"launch": {"argv": argv, "env": RECIPE_CONFIG["environment"]}},
        },
    }
    path = tmp_path / "triangle.yaml"
    path.write_text(json.dumps(cluster))
    return load_model(path, Cluster), load_model(RECIPE / "releases" / "r6x.yaml", Release)


def test_a_docker_run_cluster_creates_exactly_the_recipe_launchers_containers(
    tmp_path: Path,
) -> None:
    cluster, release = sparkgate_triangle(tmp_path)
    image = RECIPE_CONFIG["container"]["image"]
    for plan in render_all(cluster, release):
        node = cluster.node(plan.node)
        fabric = {key: str(value) for key, value in node.overrides.env.items()}
        wanted = what_doctor_reads(recipe_run(RECIPE_CONFIG, plan.rank, plan.head, fabric))
        options = create_options(rank_container(cluster, release, node, plan, image))
        assert "entrypoint" not in options, "the image's own entrypoint runs, as docker run's"
        assert options["command"] == wanted["Cmd"], f"{plan.node}: command differs"
        assert options["volumes"] == wanted["Binds"], f"{plan.node}: binds differ"
        assert options["environment"] == wanted["Env"]
        assert (options["image"], options["name"]) == (image, "dsv41-karmic-kraken")
        assert [m["Target"] for m in options["mounts"]] == [DISPLAY]  # the --mount only
        assert "working_dir" not in options
        assert options["ipc_mode"] == "host"
        assert options["shm_size"] == "16g"


def test_an_image_with_another_entrypoint_is_refused_before_a_start(tmp_path: Path) -> None:
    cluster, release = sparkgate_triangle(tmp_path)
    plan = render_all(cluster, release)[0]
    spec = rank_container(cluster, release, cluster.node(plan.node), plan, "i")
    check_entrypoint(spec, {"Entrypoint": ["vllm", "serve"]})
    with pytest.raises(BootError, match=r"has entrypoint \['/bin/sh'\]"):
        check_entrypoint(spec, {"Entrypoint": ["/bin/sh"]})
