"""The double checkout's `config/cluster.json` and `config/nodes.json`, derived from a cluster.

The recipe's launcher renders each node's `docker run` from those two files (christopherowen/
spark-ds41f bin/spark `rendered_docker_command`: `docker_run_args`, the environment, the mounts
as `--volume` binds, the image, `serve_args` then the rank arguments). For the double's launcher
to start the containers sparkgate's docker runtime would create for the same cluster, its files
are derived from that runtime's own rendering (`rank_container` of every rank's launch plan),
not written by hand beside the cluster file: one source, so the two launches can only differ
where the launcher itself differs.

Pure: no file, git or docker. What the recipe keeps cluster-wide must be the same on every
node (serve arguments, run arguments, mount templates); a cluster where it is not cannot be
written as the recipe's files, and ValueError says which value differs.
"""

from __future__ import annotations

from typing import Any

from flows.cluster.runtime.containers import RankContainer
from flows.cluster.runtime.docker import docker_spec, rank_container
from flows.spec.cluster import Cluster
from flows.spec.launch import render_all
from flows.spec.release import Release

# bin/spark `expected_command` appends these to serve_args, in this order, then `--headless`
# on a worker (`worker_args` in the vllm-recipe profile).
RANK_FLAGS = ("--node-rank", "--master-addr", "--master-port")
NODES_CONFIG = "config/nodes.json"


def rank_containers(cluster: Cluster, release: Release) -> list[RankContainer]:
    """What the docker runtime creates for each rank (image left out: the checkout names it)."""
    return [
        rank_container(cluster, release, cluster.node(plan.node), plan, "")
        for plan in render_all(cluster, release)
    ]


def split_command(spec: RankContainer, head: bool, worker_args: list[str]) -> list[str]:
    """The serve arguments of one rank: its command without the image's entrypoint, the
    worker's own arguments and the rank arguments (ValueError when they are not last)."""
    entrypoint = list(spec.image_entrypoint or ())
    command = list(spec.argv[len(entrypoint) :])
    if not head and worker_args:
        if command[-len(worker_args) :] != worker_args:
            raise ValueError(f"{spec.node}: the command does not end with {worker_args}")
        command = command[: -len(worker_args)]
    tail = command[-2 * len(RANK_FLAGS) :]
    if tuple(tail[0::2]) != RANK_FLAGS:
        raise ValueError(f"{spec.node}: the command does not end with {list(RANK_FLAGS)} values")
    return command[: -2 * len(RANK_FLAGS)]


def template(source: str, home: str, workdir: str) -> str:
    """A mount source as the recipe writes it: `{home}` for the user's home; `{workdir}` for
    the node's checkout (the double's own key: the lab's nodes share one file system, so each
    has its own checkout folder, where a Spark has `{home}/projects/spark-ds41f`)."""
    for prefix, key in ((workdir, "{workdir}"), (home, "{home}")):
        if source == prefix or source.startswith(prefix.rstrip("/") + "/"):
            return key + source[len(prefix.rstrip("/")) :]
    return source


def common_environment(envs: list[dict[str, str]]) -> dict[str, str]:
    """The variables every rank has with the same value (the cluster's `environment`)."""
    first, *others = envs
    return {key: value for key, value in first.items() if all(e.get(key) == value for e in others)}


def one(values: list[Any], what: str) -> Any:
    """The value every node shares; ValueError naming `what` when they differ."""
    if any(value != values[0] for value in values[1:]):
        raise ValueError(f"{what} differs between nodes: the recipe keeps one for the cluster")
    return values[0]


def launcher_files(
    cluster: Cluster, release: Release, home: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(`config/cluster.json` without `container.image`, `config/nodes.json`) for `cluster`
    serving `release`; `home` is the recipe user's home on the nodes (`host.home`)."""
    runtime = docker_spec(cluster)
    specs = rank_containers(cluster, release)
    plans = render_all(cluster, release)
    worker_args = list(cluster.engine.launch.worker_args)
    serve = [split_command(s, p.head, worker_args) for s, p in zip(specs, plans, strict=True)]
    mounts = [
        [[template(m.source, home, p.workdir), m.target, "ro" if m.read_only else "rw"]
         for m in s.mounts]
        for s, p in zip(specs, plans, strict=True)
    ]  # fmt: skip
    environment = common_environment([dict(s.env) for s in specs])
    head = next(p for p in plans if p.head)
    config = {
        "container": {
            "name": one([s.name for s in specs], "the container name"),
            "docker_run_args": list(runtime.run_args),
            "mounts": one(mounts, "a mount"),
        },
        "host": {"home": home},
        "serve_args": one(serve, "the serve arguments"),
        "environment": dict(sorted(environment.items())),
        "distributed": {"master_addr": head.address, "master_port": str(cluster.ports.rendezvous)},
        "deployment": {
            "launch_enabled": True,
            "ready_url": head.ready_url,
            "ready_timeout_seconds": round(cluster.engine.ready.timeout_s),
        },
        "nodes_config": NODES_CONFIG,
    }
    nodes = {
        "ssh_user": getattr(cluster.transport, "user", ""),
        "nodes": [
            {
                "name": plan.node,
                "rank": plan.rank,
                "head": plan.head,
                "management_ip": plan.address,
                "docker_host": cluster.node(plan.node).overrides.docker_daemon,
                "workdir": plan.workdir,
                "environment": {
                    key: value for key, value in sorted(spec.env.items()) if key not in environment
                },
            }
            for spec, plan in zip(specs, plans, strict=True)
        ],
    }
    return config, nodes
