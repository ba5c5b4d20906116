"""The double's launcher (`bin/spark cluster start|stop`, `status`) without root or docker.

Deliverable 4 of issue 26 qualifies what the recipe's own launcher starts, so on the double the
launcher must start the containers sparkgate's docker runtime would create for the same cluster:
the `docker run` it renders from the checkout's files (derived by `recipe_config`) carries the
runtime's command (the image's entrypoint kept, rank arguments last), binds, environment and run
arguments, node by node. Its refusals come before any docker call, as the recipe's do: a dirty
checkout and a configuration not enabled for launch. The operator example's three commands are
ones the launcher's parser (the recipe's command names) accepts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flows.cluster.runtime.containers import create_options
from flows.cluster.runtime.docker import rank_container
from flows.cluster.runtime.run_args import run_arg_options
from flows.spec.cluster import Cluster, OperatorRuntime
from flows.spec.launch import render_all
from flows.spec.load import load_model
from flows.spec.release import Release
from tests.lab.recipe_double import double, recipe_config, spark_cluster
from tests.support.paths import ROOT

OPERATOR = ROOT / "examples" / "spark-ds41f" / "clusters" / "tp3-triangle-operator.yaml"
R6X = ROOT / "examples" / "spark-ds41f" / "releases" / "r6x.yaml"
TAG = "vllm-ds41f-kkref:19f2c20ed4d6-r6x"
LAB = {
    "transport": {"user": "root", "key_file": "/lab/key", "known_hosts": "/lab/kh"},
    "nodes": [{"address": f"198.18.13.{10 + i}",
               "overrides": {"docker_daemon": f"unix:///lab/{i}.sock"}} for i in range(3)],
}  # fmt: skip


@pytest.fixture
def lab_cluster(tmp_path: Path) -> Cluster:
    """The operator example with the lab overlay (addresses, users, paths) of a made-up lab."""
    root = tmp_path / "spark"
    example = load_model(OPERATOR, Cluster)
    workdirs = {n.name: f"{root}/{n.name}{double.RECIPE_CHECKOUT}" for n in example.nodes}
    path = double.write_lab_cluster(OPERATOR, LAB, root, workdirs, tmp_path / "lab.yaml")
    return load_model(path, Cluster)


def _home(cluster: Cluster) -> str:
    snapshot = docker_mount_source(cluster, "/models")
    return snapshot[: snapshot.index("/.cache/")]


def docker_mount_source(cluster: Cluster, target: str) -> str:
    return next(m.source for m in cluster.runtime.mounts if m.target == target)  # type: ignore[union-attr]


def what_docker_gets(run: list[str]) -> dict[str, Any]:
    """From a `docker run -d --name NAME ...` argv: the run arguments, binds, environment and
    command (what inspect shows as HostConfig, Binds, Env and Cmd)."""
    image_at = run.index(TAG)
    words = iter(run[5:image_at])
    binds, env, args = [], {}, []
    for word in words:
        if word == "--volume":
            binds.append(next(words))
        elif word == "--env":
            key, _, value = next(words).partition("=")
            env[key] = value
        else:
            args.append(word)
    return {"name": run[4], "Cmd": run[image_at + 1 :], "Binds": binds, "Env": env, "args": args}


def test_the_launchers_docker_run_is_the_container_the_docker_runtime_creates(
    lab_cluster: Cluster,
) -> None:
    release = load_model(R6X, Release)
    config, nodes = recipe_config.launcher_files(lab_cluster, release, _home(lab_cluster))
    config["container"]["image"] = TAG
    assert config["container"]["mounts"][-1] == ["{workdir}/cache", "/cache", "rw"]
    by_name = {node["name"]: node for node in nodes["nodes"]}
    runtime = lab_cluster.runtime
    assert isinstance(runtime, OperatorRuntime)
    for plan in render_all(lab_cluster, release):
        node = lab_cluster.node(plan.node)
        wanted = create_options(rank_container(lab_cluster, release, node, plan, TAG))
        run = spark_cluster.rendered_docker_command(config, by_name[plan.node])
        got = what_docker_gets(run)
        assert got["name"] == wanted["name"] == "dsv41-karmic-kraken"
        assert got["Cmd"] == wanted["command"], f"{plan.node}: command differs"
        assert (got["Cmd"][-1] == "--headless") is not plan.head  # rank arguments last
        assert got["Binds"] == wanted["volumes"], f"{plan.node}: binds differ"
        assert got["Env"] == wanted["environment"], f"{plan.node}: environment differs"
        assert got["Env"]["VLLM_HOST_IP"] == plan.address
        assert got["args"] == runtime.run_args
        assert run_arg_options(got["args"])["mounts"] == wanted["mounts"]  # the display device
        assert [*runtime.image_entrypoint, *got["Cmd"]] == plan.argv  # `vllm serve` + command


def test_serve_arguments_need_the_rank_arguments_last(lab_cluster: Cluster) -> None:
    release = load_model(R6X, Release)
    [head, worker, _] = recipe_config.rank_containers(lab_cluster, release)
    serve = recipe_config.split_command(head, True, ["--headless"])
    assert serve == recipe_config.split_command(worker, False, ["--headless"])
    assert serve[0] == "/models"
    moved = head.model_copy(update={"argv": (*head.argv[:2], *head.argv[-6:], *head.argv[2:-6])})
    with pytest.raises(ValueError, match="does not end with"):
        recipe_config.split_command(moved, True, ["--headless"])


def _checkout(tmp_path: Path, lab_cluster: Cluster, **changes: Any) -> Path:
    config, nodes = recipe_config.launcher_files(
        lab_cluster, load_model(R6X, Release), _home(lab_cluster)
    )
    config["deployment"].update(changes)
    checkout = tmp_path / "spark-ds41f"
    double.make_checkout(
        checkout, base_image="sparkgate-base:x", tag=TAG, tests=["tests/t.py"],
        launcher=(config, nodes),
    )  # fmt: skip
    return checkout


def _spark(checkout: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """bin/spark as a shell on a Spark runs it: Python writes its scripts/ bytecode there."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.run(
        [sys.executable, "bin/spark", *argv], cwd=checkout, text=True, capture_output=True,
        check=False, timeout=60, env=env,
    )  # fmt: skip


def test_the_checkout_commits_the_launch_config_and_ignores_the_site_node_map(
    tmp_path: Path, lab_cluster: Cluster
) -> None:
    checkout = _checkout(tmp_path, lab_cluster)
    assert double.git(checkout, "status", "--porcelain", "--untracked-files=all") == ""
    assert double.git(checkout, "ls-files", "config/nodes.json") == ""  # the site's own copy
    before = json.loads((checkout / "config" / "cluster.json").read_text())
    double.next_release(checkout, "vllm-ds41f-kkref:19f2c20ed4d6-r6y")
    after = json.loads((checkout / "config" / "cluster.json").read_text())
    assert after["container"].pop("image") == "vllm-ds41f-kkref:19f2c20ed4d6-r6y"
    assert before["container"].pop("image") == TAG
    assert after == before  # a release changes the image only


def test_the_launcher_plans_then_refuses_a_dirty_checkout_before_any_docker_call(
    tmp_path: Path, lab_cluster: Cluster
) -> None:
    checkout = _checkout(tmp_path, lab_cluster)
    config = ["--cluster-config", "config/cluster.json"]
    plan = _spark(checkout, *config, "cluster", "start")
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.splitlines()[-1] == "plan only; pass --apply to start the cluster"
    launches = [line for line in plan.stdout.splitlines() if "docker run -d --name" in line]
    assert [line.split(":")[0].strip() for line in launches] == ["dgx2", "dgx3", "dgx1"]
    # Running bin/spark (its scripts/ import) leaves the checkout clean for the next command.
    assert double.git(checkout, "status", "--porcelain", "--untracked-files=all") == ""

    (checkout / "sparkgate.lock").write_text("{}\n")  # what issue 26 item 3 is about
    dirty = _spark(checkout, *config, "cluster", "start", "--apply", "--replace")
    assert dirty.returncode == 1
    assert "ERROR: deployment requires a clean local repository" in dirty.stderr


def test_a_configuration_not_enabled_for_launch_is_refused(
    tmp_path: Path, lab_cluster: Cluster
) -> None:
    checkout = _checkout(tmp_path, lab_cluster, launch_enabled=False)
    refused = _spark(checkout, "cluster", "start", "--apply", "--replace")
    assert refused.returncode == 1
    assert "ERROR: this cluster configuration is not authorized for launch" in refused.stderr


def test_the_operator_examples_commands_are_the_launchers_own(
    tmp_path: Path, lab_cluster: Cluster
) -> None:
    """Each command parses (`--help` after it: argparse stops there, exit 0, not 2)."""
    checkout = _checkout(tmp_path, lab_cluster)
    runtime = load_model(OPERATOR, Cluster).runtime
    assert isinstance(runtime, OperatorRuntime)
    commands = runtime.commands
    for argv in (commands.start, commands.stop, commands.status):
        assert argv[0] == "bin/spark"
        parsed = _spark(checkout, *argv[1:], "--help")
        assert parsed.returncode == 0, f"{argv}: {parsed.stderr}"
    wrong = _spark(checkout, "--cluster-config", "config/cluster.json", "cluster", "status")
    assert wrong.returncode == 2  # the recipe's `cluster` group has no `status`
    assert "invalid choice: 'status'" in wrong.stderr
