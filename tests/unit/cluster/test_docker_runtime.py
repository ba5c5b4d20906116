"""Daemon command lines, image verification and rank container options, without a daemon."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cluster.build.distribute import compare_facts, image_facts
from flows.cluster.lab.dockerd import daemon_root, dockerd_argv, start_dockerd
from flows.cluster.runtime.containers import (
    BindMount,
    RankContainer,
    container_state,
    create_options,
    plan_container,
)
from flows.errors import BuildError, ClusterError
from flows.spec.launch import LaunchPlan


def test_daemon_lives_under_the_state_dir(tmp_path: Path) -> None:
    root = daemon_root("node1", tmp_path)
    assert root == tmp_path.resolve() / "docker" / "node1"
    argv = dockerd_argv(root, "overlay2")
    assert argv[0] == "dockerd"
    assert "--bridge=none" in argv
    assert "--iptables=false" in argv
    assert f"--host=unix://{root / 'api.sock'}" in argv
    assert f"--data-root={root / 'data'}" in argv
    assert "--storage-driver=overlay2" in argv


def test_daemon_in_a_network_namespace() -> None:
    argv = dockerd_argv(Path("/s/docker/n1"), "vfs", netns="sg-n1")
    assert argv[:3] == ["nsenter", "--net=/run/netns/sg-n1", "dockerd"]


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden"])
def test_daemon_names_are_plain_folder_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(ClusterError, match="invalid docker daemon name"):
        daemon_root(name, tmp_path)


def test_a_socket_path_over_the_unix_limit_is_refused_before_starting(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    with pytest.raises(ClusterError, match="over the unix limit"):
        start_dockerd("n1", deep)
    assert not (deep / "docker").exists()


def inspect_doc(image_id: str, layers: list[str], env: list[str]) -> dict[str, object]:
    return {
        "Id": image_id,
        "RootFS": {"Type": "layers", "Layers": layers},
        "Config": {"Entrypoint": ["python", "-m", "sparkengine"], "Env": env, "User": "engine"},
        "Architecture": "amd64",
        "Os": "linux",
        "Size": 1000,
    }


def test_same_id_is_the_same_image() -> None:
    build = image_facts("n1", inspect_doc("sha256:a", ["l1", "l2"], ["A=1"]))
    other = image_facts("n2", inspect_doc("sha256:a", ["l1", "l2"], ["A=1"]))
    assert compare_facts(build, other) == "same-id"


def test_other_id_with_same_layers_and_config_is_the_same_content() -> None:
    build = image_facts("n1", inspect_doc("sha256:a", ["l1", "l2"], ["A=1"]))
    other = image_facts("n2", inspect_doc("sha256:index", ["l1", "l2"], ["A=1"]))
    assert compare_facts(build, other) == "same-content"


@pytest.mark.parametrize(
    ("layers", "env", "what"),
    [(["l1", "lX"], ["A=1"], "layers"), (["l1", "l2"], ["A=2"], "config")],
)
def test_different_layers_or_config_fail_naming_the_node(
    layers: list[str], env: list[str], what: str
) -> None:
    build = image_facts("n1", inspect_doc("sha256:a", ["l1", "l2"], ["A=1"]))
    other = image_facts("n3", inspect_doc("sha256:b", layers, env))
    with pytest.raises(BuildError, match=f"node n3 .* different {what}"):
        compare_facts(build, other)


def rank(**changes: object) -> RankContainer:
    values: dict[str, object] = {
        "cluster": "lab",
        "node": "node1",
        "rank": 1,
        "image": "sparkengine:0123456789ab-r1",
        "name": "sparkgate-lab-node1",
        "argv": ("python", "-m", "sparkengine", "serve", "--rank", "1"),
        "env": {"SPARKENGINE_FAULT_SLOWDOWN": "0.05"},
        "mounts": (BindMount(source="/n1/cache/kernels", target="/cache/kernels"),),
        "release": "r1",
    }
    values.update(changes)
    return RankContainer.model_validate(values)


def test_rank_container_options() -> None:
    options = create_options(rank())
    assert options["network_mode"] == "host"
    assert options["entrypoint"] == ["python"]
    assert options["command"] == ["-m", "sparkengine", "serve", "--rank", "1"]
    assert options["environment"] == {"SPARKENGINE_FAULT_SLOWDOWN": "0.05"}
    assert options["labels"] == {
        "io.sparkgate": "rank",
        "io.sparkgate.cluster": "lab",
        "io.sparkgate.node": "node1",
        "io.sparkgate.rank": "1",
        "io.sparkgate.release": "r1",
    }
    (mount,) = options["mounts"]
    assert (mount["Type"], mount["Source"], mount["Target"], mount["ReadOnly"]) == (
        "bind",
        "/n1/cache/kernels",
        "/cache/kernels",
        False,
    )
    assert "user" not in options


def test_hostile_arguments_stay_single_literal_arguments() -> None:
    options = create_options(rank(argv=("python", "-c", "print(1)", "x; rm -rf /", "$(id)")))
    assert options["command"] == ["-c", "print(1)", "x; rm -rf /", "$(id)"]


def test_an_empty_command_line_is_refused() -> None:
    with pytest.raises(ClusterError, match="empty command line"):
        create_options(rank(argv=()))


def test_container_state_from_inspect() -> None:
    state = container_state(
        {
            "Id": "abc",
            "Name": "/sparkgate-lab-node1",
            "State": {
                "Status": "exited",
                "Running": False,
                "ExitCode": 137,
                "OOMKilled": True,
                "Error": "",
                "StartedAt": "2026-12-02T10:00:00Z",
                "FinishedAt": "2026-12-02T10:01:00Z",
            },
            "Config": {"Labels": {"io.sparkgate.rank": "1"}},
        }
    )
    assert (state.name, state.running, state.exit_code, state.oom_killed) == (
        "sparkgate-lab-node1",
        False,
        137,
        True,
    )
    assert state.labels == {"io.sparkgate.rank": "1"}


def test_a_launch_plan_becomes_a_container_with_node_paths_mounted() -> None:
    plan = LaunchPlan(
        node="n2",
        rank=2,
        head=False,
        address="10.0.0.2",
        argv=["python", "-m", "sparkengine", "serve", "--cache", "kernels=/w/cache/kernels"],
        env={"A": "1"},
        cwd="/w",
        workdir="/w",
        model_dir="/w/model",
        cache_dirs={"kernels": "/w/cache/kernels", "jit": "/var/jit"},
        kernel_cache="kernels",
        ready_url=None,
        stop_signal="SIGINT",
        stop_grace_s=5,
    )
    spec = plan_container(plan, cluster="lab", image="e:1-r1", name="sg-n2", release="r1")
    assert (spec.node, spec.rank, spec.cwd, spec.stop_signal) == ("n2", 2, "/w", "SIGINT")
    assert spec.argv == tuple(plan.argv)
    assert [(m.source, m.target) for m in spec.mounts] == [
        ("/w", "/w"),
        ("/w/cache/kernels", "/w/cache/kernels"),
        ("/var/jit", "/var/jit"),
    ]
    assert create_options(spec)["working_dir"] == "/w"
