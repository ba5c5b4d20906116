"""The cluster commands of the double's `bin/spark`: `cluster start`, `cluster stop`, `status`.

`make_checkout` copies this file to the checkout's `scripts/` (the recipe's bin/spark imports
its helpers from there too); `spark_double.py` adds the commands to its parser. Modelled on
christopherowen/spark-ds41f `bin/spark` `command_cluster_start`, `command_cluster_stop`,
`command_status`, `rendered_docker_command`, `expected_command`, `expected_binds`,
`require_local_deployment_state`, `node_runtime_problems` and `wait_for_api`, with the same
refusals, printed lines and exit statuses:

- `cluster start` prints its plan (each node's `docker run`, workers by rank, then the head) and,
  without `--apply`, "plan only; pass --apply to start the cluster", exit 0; a configuration with
  `deployment.launch_enabled` false: "ERROR: this cluster configuration is not authorized for
  launch", exit 1; a checkout with any change or untracked file: "ERROR: deployment requires a
  clean local repository", exit 1; then, per node, an unavailable mount source ("NODE: rw mount
  source is unavailable: PATH"), a missing image ("NODE: image is unavailable: TAG") and, without
  `--replace`, an existing container ("NODE: container NAME already exists; use --replace
  explicitly"), each an `ERROR:` line, exit 1. With `--replace` each node's container of that
  name is stopped and renamed `NAME-pre-<time>` before the launch, removed once the API is
  ready, and renamed back and restarted when the start fails. Each launch prints "NODE: launched
  ID (+Ns)"; the wait "waiting up to Ns for HEAD API readiness", then "API ready; JIT/autotuning
  startup has completed" and "API ready at +Ns". A container that stops first ends the start
  with "ERROR: NODE: NAME stopped before readiness (STATE)" and its last 20 log lines, the
  started containers removed ("rolling back containers started by this command"), exit 1.
- `cluster stop` prints "NODE: stop exact container NAME and stop its memguard" per node and,
  with `--apply`, stops each node's container (`docker stop --time 60`; `--remove` removes it;
  an absent one: "NODE: NAME is already absent"), exit 1 when a node fails.
- `status` prints one line per node, "NODE<TAB>NAME|IMAGE|STATUS" (or "not running") and its
  memguard state, exit 1 when a node has no running container.

What differs, because the double runs in the lab: the recipe reaches every node over SSH (its
`docker`, `curl` and checkout checks run there); the lab's hosts share this machine's file
system and each node's dockerd listens on a unix socket, so the double runs the same `docker`
commands here with `DOCKER_HOST` set to the node's socket (`docker_host` in its node map, the
lab cluster's `overrides.docker_daemon`), tests mount sources here, and reads the ready URL
itself. There is no memory guard (no systemd unit to arm: the status says `memguard=inactive`),
no kernel, RoCE GID, sudo or per-node checkout check (the nodes' checkouts are folders of one
file system, not synchronised clones), and a node's environment is the cluster's `environment`
plus the node map's `environment` instead of the recipe's topology render. Mount sources may
name `{workdir}`, the node's checkout folder (`workdir` in its node map), where the recipe's
are `{home}/projects/spark-ds41f` on every node. The files come from `recipe_config.py`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STOP_SECONDS = "60"


def read_json(relative: str) -> dict[str, Any]:
    document = json.loads((ROOT / relative).read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def configuration(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    cluster = read_json(args.cluster_config)
    nodes_config = str(cluster.get("nodes_config", "config/nodes.json"))
    if not (ROOT / nodes_config).is_file():
        raise SystemExit(
            f"{nodes_config} is missing: copy config/nodes.example.json to it and edit "
            "it for your site (docs/replicate.md, Site configuration)"
        )
    return cluster, read_json(nodes_config)


def expected_environment(cluster: dict[str, Any], node: dict[str, Any]) -> dict[str, str]:
    return {**cluster["environment"], **node.get("environment", {})}


def expected_command(cluster: dict[str, Any], node: dict[str, Any]) -> list[str]:
    distributed = cluster["distributed"]
    command = [*cluster["serve_args"], "--node-rank", str(node["rank"]),
               "--master-addr", distributed["master_addr"],
               "--master-port", distributed["master_port"]]  # fmt: skip
    return command if node["head"] else [*command, "--headless"]


def mount_sources(cluster: dict[str, Any], node: dict[str, Any]) -> list[tuple[str, str, str]]:
    home = cluster["host"]["home"]
    return [
        (source.format(home=home, workdir=node["workdir"]), target, mode)
        for source, target, mode in cluster["container"]["mounts"]
    ]


def expected_binds(cluster: dict[str, Any], node: dict[str, Any]) -> list[str]:
    """The --volume values; docker inspect keeps them verbatim in HostConfig.Binds."""
    return [f"{source}:{target}:{mode}" for source, target, mode in mount_sources(cluster, node)]


def rendered_docker_command(cluster: dict[str, Any], node: dict[str, Any]) -> list[str]:
    container = cluster["container"]
    command = ["docker", "run", "-d", "--name", container["name"]]
    command.extend(container["docker_run_args"])
    for key, value in sorted(expected_environment(cluster, node).items()):
        command.extend(["--env", f"{key}={value}"])
    for bind in expected_binds(cluster, node):
        command.extend(["--volume", bind])
    command.append(container["image"])
    command.extend(expected_command(cluster, node))
    return command


def on_node(node: dict[str, Any], *command: str) -> subprocess.CompletedProcess[str]:
    """A `docker` command line (the recipe runs it over SSH) on the node's own daemon."""
    env = {**os.environ, "DOCKER_HOST": str(node["docker_host"])}
    return subprocess.run(command, env=env, text=True, capture_output=True, check=False)


def deployment_order(nodes: dict[str, Any]) -> list[dict[str, Any]]:
    workers = sorted((n for n in nodes["nodes"] if not n["head"]), key=lambda n: n["rank"])
    return workers + [n for n in nodes["nodes"] if n["head"]]


def repository_dirty() -> str:
    done = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=ROOT, text=True, capture_output=True, check=False,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(done.stderr.strip() or "cannot inspect repository status")
    return done.stdout.strip()


def require_local_deployment_state() -> None:
    if repository_dirty():
        print("ERROR: deployment requires a clean local repository", file=sys.stderr)
        raise SystemExit(1)


def node_runtime_problems(
    cluster: dict[str, Any], node: dict[str, Any], *, allow_existing: bool
) -> list[str]:
    problems = []
    for source, _, mode in mount_sources(cluster, node):
        if not os.access(source, os.W_OK if mode == "rw" else os.R_OK):
            problems.append(f"{node['name']}: {mode} mount source is unavailable: {source}")
    image = cluster["container"]["image"]
    if on_node(node, "docker", "image", "inspect", image).returncode:
        problems.append(f"{node['name']}: image is unavailable: {image}")
    name = cluster["container"]["name"]
    if on_node(node, "docker", "inspect", name).returncode == 0 and not allow_existing:
        problems.append(
            f"{node['name']}: container {name} already exists; use --replace explicitly"
        )
    return problems


def wait_for_api(cluster: dict[str, Any], nodes: dict[str, Any]) -> None:
    head = next(node for node in nodes["nodes"] if node["head"])
    name = cluster["container"]["name"]
    url = cluster["deployment"]["ready_url"]
    timeout = int(cluster["deployment"]["ready_timeout_seconds"])
    deadline = time.monotonic() + timeout
    print(f"waiting up to {timeout}s for {head['name']} API readiness", flush=True)
    state_format = "{{.State.Running}} exit={{.State.ExitCode}} oom={{.State.OOMKilled}}"
    while time.monotonic() < deadline:
        for node in nodes["nodes"]:
            state = on_node(node, "docker", "inspect", "--format", state_format, name)
            if not state.stdout.startswith("true "):
                detail = state.stdout.strip() or state.stderr.strip() or "absent"
                logs = on_node(node, "docker", "logs", "--tail", "20", name)
                said = (logs.stdout + logs.stderr).strip()[-4000:]
                raise RuntimeError(
                    f"{node['name']}: {name} stopped before readiness ({detail})\n{said}"
                )
        try:
            with urllib.request.urlopen(url, timeout=3):
                print("API ready; JIT/autotuning startup has completed", flush=True)
                return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"API did not become ready within {timeout}s")


def replace(
    cluster: dict[str, Any], node: dict[str, Any], suffix: str
) -> tuple[str | None, str | None]:
    """Stop and keep one node's old container; return (backup, error)."""
    name = cluster["container"]["name"]
    if on_node(node, "docker", "inspect", name).returncode:
        return None, None
    backup = f"{name}-{suffix}"
    if on_node(node, "docker", "stop", "--time", STOP_SECONDS, name).returncode:
        return None, f"{node['name']}: could not stop {name}"
    if on_node(node, "docker", "rename", name, backup).returncode:
        on_node(node, "docker", "start", name)
        return None, f"{node['name']}: could not preserve {name}"
    return backup, None


def restore_containers(
    cluster: dict[str, Any],
    nodes: dict[str, Any],
    backups: dict[str, str],
    started: list[dict[str, Any]],
) -> None:
    name = cluster["container"]["name"]
    for node in started:
        on_node(node, "docker", "rm", "--force", name)
    for node in deployment_order(nodes):
        backup = backups.get(node["name"])
        if not backup:
            continue
        if on_node(node, "docker", "rename", backup, name).returncode:
            print(f"WARN: {node['name']}: could not restore container name", file=sys.stderr)
        elif on_node(node, "docker", "start", name).returncode:
            print(f"WARN: {node['name']}: could not restart previous container", file=sys.stderr)


def command_cluster_start(args: argparse.Namespace) -> int:
    cluster, nodes = configuration(args)
    if args.apply and not cluster["deployment"]["launch_enabled"]:
        print("ERROR: this cluster configuration is not authorized for launch", file=sys.stderr)
        return 1
    order = deployment_order(nodes)
    print("start plan (fail-closed startup memory guards):")
    for node in order:
        print(f"  {node['name']}: pre-arm startup memguard")
        print(f"  {node['name']}: {shlex.join(rendered_docker_command(cluster, node))}")
    print("  wait for API/JIT readiness, then switch every node to steady memguard")
    if not args.apply:
        print("plan only; pass --apply to start the cluster")
        return 0
    require_local_deployment_state()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(nodes["nodes"])) as pool:
        found = pool.map(
            lambda node: node_runtime_problems(cluster, node, allow_existing=args.replace),
            nodes["nodes"],
        )
        problems = [problem for node_problems in found for problem in node_problems]
    if problems:
        for problem in problems:
            print(f"ERROR: {problem}", file=sys.stderr)
        return 1
    suffix = f"pre-{int(time.time())}"
    backups: dict[str, str] = {}
    started: list[dict[str, Any]] = []
    began = time.monotonic()

    def elapsed() -> str:
        return f"+{time.monotonic() - began:.1f}s"

    try:
        if args.replace:
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(nodes["nodes"])) as pool:
                outcomes = list(
                    pool.map(lambda node: replace(cluster, node, suffix), nodes["nodes"])
                )
            errors = []
            for node, (backup, error) in zip(nodes["nodes"], outcomes, strict=True):
                if backup:
                    backups[node["name"]] = backup
                if error:
                    errors.append(error)
            if errors:
                raise RuntimeError("; ".join(errors))
        for node in order:
            result = on_node(node, *rendered_docker_command(cluster, node))
            if result.returncode:
                detail = result.stderr.strip() or result.stdout.strip()
                raise RuntimeError(f"{node['name']}: launch failed: {detail}")
            started.append(node)
            print(f"{node['name']}: launched {result.stdout.strip()} ({elapsed()})", flush=True)
        wait_for_api(cluster, nodes)
        print(f"API ready at {elapsed()}", flush=True)
    except (RuntimeError, KeyboardInterrupt) as error:
        print(f"ERROR: {error or 'cluster start interrupted'}", file=sys.stderr)
        print("rolling back containers started by this command", file=sys.stderr)
        restore_containers(cluster, nodes, backups, started)
        return 130 if isinstance(error, KeyboardInterrupt) else 1
    for node in nodes["nodes"]:
        backup = backups.get(node["name"])
        if backup and on_node(node, "docker", "rm", backup).returncode:
            print(f"WARN: {node['name']}: retained backup container {backup}")
    print(f"cluster ready; the double arms no memory guards ({elapsed()})")
    return 0


def command_cluster_stop(args: argparse.Namespace) -> int:
    cluster, nodes = configuration(args)
    name = cluster["container"]["name"]
    action = "stop and remove" if args.remove else "stop"
    for node in nodes["nodes"]:
        print(f"{node['name']}: {action} exact container {name} and stop its memguard")
    if not args.apply:
        print("plan only; pass --apply to stop the cluster")
        return 0

    def stop_node(node: dict[str, Any]) -> tuple[list[str], list[str]]:
        """Stop one node's container; return (messages, errors)."""
        if on_node(node, "docker", "inspect", name).returncode:
            return [f"{node['name']}: {name} is already absent"], []
        stopped = on_node(node, "docker", "stop", "--time", STOP_SECONDS, name)
        if stopped.returncode:
            return [], [f"{node['name']}: {stopped.stderr.strip()}"]
        if args.remove:
            removed = on_node(node, "docker", "rm", name)
            if removed.returncode:
                return [], [f"{node['name']}: {removed.stderr.strip()}"]
        return [], []

    if args.parallel:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(nodes["nodes"])) as pool:
            outcomes = list(pool.map(stop_node, nodes["nodes"]))
    else:
        outcomes = [stop_node(node) for node in nodes["nodes"]]
    failed = False
    for messages, errors in outcomes:
        for message in messages:
            print(message)
        for error in errors:
            print(f"ERROR: {error}", file=sys.stderr)
            failed = True
    return int(failed)


def command_status(args: argparse.Namespace) -> int:
    cluster, nodes = configuration(args)
    name = cluster["container"]["name"]
    failed = False
    for node in nodes["nodes"]:
        result = on_node(node, "docker", "ps", "--filter", f"name=^{name}$",
                         "--format", "{{.Names}}|{{.Image}}|{{.Status}}")  # fmt: skip
        output = result.stdout.strip() if result.returncode == 0 else result.stderr.strip()
        print(f"{node['name']}\t{output or 'not running'}\tmemguard=inactive")
        failed |= result.returncode != 0 or not result.stdout.strip()
    return int(failed)


def add_commands(commands: Any) -> None:
    """`status` and `cluster start|stop` on bin/spark's subparsers, as the recipe names them."""
    status = commands.add_parser("status", help="show configured live containers")
    status.set_defaults(func=command_status)
    cluster = commands.add_parser("cluster", help="plan or apply coordinated node operations")
    cluster_commands = cluster.add_subparsers(dest="cluster_command", required=True)
    start = cluster_commands.add_parser(
        "start", help="preflight and start workers, head, then memory guards"
    )
    start.add_argument("--replace", action="store_true", help="replace existing exact containers")
    start.add_argument("--apply", action="store_true", help="perform the planned coordinated start")
    start.set_defaults(func=command_cluster_start)
    stop = cluster_commands.add_parser(
        "stop", help="stop the exact promoted container on every node"
    )
    stop.add_argument("--remove", action="store_true", help="remove stopped containers as well")
    stop.add_argument("--apply", action="store_true", help="perform the planned coordinated stop")
    stop.add_argument(
        "--parallel", action="store_true", help="stop the nodes concurrently instead of in turn"
    )
    stop.set_defaults(func=command_cluster_stop)
