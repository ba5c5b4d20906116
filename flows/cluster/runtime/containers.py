"""Run one engine rank as a container on a node's Docker daemon, and take it down again.

In production each GB10 node runs its rank in Docker; the pipeline drives every node's daemon
through the SDK (a unix socket here and on lab hosts, `ssh://` on real nodes). A rank container
uses host networking (ranks meet on the nodes' own addresses), bind-mounts its cache folders so
cold and warm boots are decided on the node's disk, takes argv and env from the launch plan, and
carries labels naming sparkgate, the cluster, the node and the rank, so the pipeline can always
find, inspect, log and remove exactly its own containers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import docker
from docker.errors import APIError, NotFound
from docker.types import Mount
from pydantic import BaseModel, ConfigDict
from requests.exceptions import RequestException

from flows.errors import BootError, ClusterError
from flows.spec.launch import LaunchPlan

LABEL = "io.sparkgate"
DEFAULT_GRACE_S = 10.0


class BindMount(BaseModel):
    """A folder on the node mounted into the container (cache folders, model, workdir)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    target: str
    read_only: bool = False


class RankContainer(BaseModel):
    """Everything needed to start one rank's container; argv is the full command line."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str
    node: str
    rank: int
    image: str
    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = {}
    cwd: str | None = None
    mounts: tuple[BindMount, ...] = ()
    user: str | None = None
    stop_signal: str = "SIGTERM"
    release: str = ""
    options: Mapping[str, Any] = {}
    image_entrypoint: tuple[str, ...] | None = None
    """Set: run the image's own entrypoint (these words, which argv starts with) and mount as
    binds, as `docker run IMAGE ARGS --volume S:T:M` does; None: argv[0] is the entrypoint."""


class ContainerState(BaseModel):
    """What `docker inspect` says about a rank container, for status tables and evidence."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    status: str
    running: bool
    exit_code: int
    oom_killed: bool
    error: str
    started_at: str
    finished_at: str
    labels: Mapping[str, str]


def plan_container(
    plan: LaunchPlan,
    *,
    cluster: str,
    image: str,
    name: str,
    release: str = "",
    extra_mounts: tuple[BindMount, ...] = (),
    options: Mapping[str, Any] | None = None,
    image_entrypoint: tuple[str, ...] | None = None,
) -> RankContainer:
    """The container for a rendered launch plan: workdir and cache folders mounted at the same
    paths as on the node, so argv and env written for the node work unchanged inside.

    With `image_entrypoint` (the operator's `docker run` parity) only `extra_mounts` are
    mounted and no working directory is set: the recipe's `doctor --live` reports any other
    bind as an "extra mount" (bin/spark `mount_problems`).
    """
    folders = dict.fromkeys([plan.workdir, *plan.cache_dirs.values()])
    own = tuple(BindMount(source=path, target=path) for path in folders)
    mounts = own if image_entrypoint is None else ()
    return RankContainer(
        cluster=cluster,
        node=plan.node,
        rank=plan.rank,
        image=image,
        name=name,
        argv=tuple(plan.argv),
        env=plan.env,
        cwd=plan.cwd if image_entrypoint is None else None,
        mounts=mounts + extra_mounts,
        stop_signal=plan.stop_signal,
        release=release,
        options=dict(options or {}),
        image_entrypoint=image_entrypoint,
    )


def container_labels(spec: RankContainer) -> dict[str, str]:
    """Labels that identify a rank container as sparkgate's, with cluster, node and rank."""
    return {
        LABEL: "rank",
        f"{LABEL}.cluster": spec.cluster,
        f"{LABEL}.node": spec.node,
        f"{LABEL}.rank": str(spec.rank),
        f"{LABEL}.release": spec.release,
    }


def create_options(spec: RankContainer) -> dict[str, Any]:
    """The SDK's `containers.create` arguments for spec (pure: no daemon involved)."""
    if not spec.argv:
        raise ClusterError(f"node {spec.node} rank {spec.rank}: empty command line")
    options: dict[str, Any] = {
        "image": spec.image,
        "name": spec.name,
        **command_options(spec),
        "environment": dict(spec.env),
        "labels": container_labels(spec),
        "network_mode": "host",
        **mount_options(spec),
        "stop_signal": spec.stop_signal,
        "detach": True,
    }
    if spec.cwd is not None:
        options["working_dir"] = spec.cwd
    if spec.user is not None:
        options["user"] = spec.user
    return merged_options(spec.options, options)


def command_options(spec: RankContainer) -> dict[str, Any]:
    """Entrypoint and command: argv split at its first word, or the image's entrypoint kept
    and the rest of argv its command (Config.Cmd, which the recipe's doctor compares with
    its serve arguments: bin/spark `expected_command`)."""
    if spec.image_entrypoint is None:
        return {"entrypoint": [spec.argv[0]], "command": list(spec.argv[1:])}
    words = len(spec.image_entrypoint)
    if tuple(spec.argv[:words]) != spec.image_entrypoint:
        raise ClusterError(
            f"node {spec.node} rank {spec.rank}: argv starts {list(spec.argv[:words])}, not the "
            f"image's entrypoint {list(spec.image_entrypoint)} (runtime.image_entrypoint)"
        )
    return {"command": list(spec.argv[words:])}


def mount_options(spec: RankContainer) -> dict[str, Any]:
    """Mounts as the SDK's Mount objects (HostConfig.Mounts), or, with the image's entrypoint,
    as `--volume SRC:DST:MODE` binds (HostConfig.Binds, which the recipe's doctor compares)."""
    if spec.image_entrypoint is None:
        return {
            "mounts": [
                Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
                for m in spec.mounts
            ]
        }
    return {"volumes": [bind_text(m) for m in spec.mounts]}


def bind_text(mount: BindMount) -> str:
    """`SRC:DST:MODE`, as `docker run --volume` takes it and inspect's Binds keeps it."""
    return f"{mount.source}:{mount.target}:{'ro' if mount.read_only else 'rw'}"


LIST_OPTIONS = (
    "mounts", "devices", "device_requests", "device_cgroup_rules", "cap_add", "security_opt",
    "ulimits", "volumes",
)  # fmt: skip
"""Options that add up: the run arguments' entries and the runtime's own are all kept."""


def merged_options(run_args: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """The runtime's own options over the run arguments', list options concatenated.

    A plain dict merge would let the runtime's `mounts` (cluster mounts, cache folders) replace
    the `--mount` entries of the run arguments: the recipe's display device
    (`/dev/dri/by-path/...-card -> /dev/dri/card0`, bin/spark `drm_card_problems`) would be
    dropped and a worker with `SPARK3_DISPLAY_CARVEOUT_WEIGHTS=1` refuses to start without it.
    """
    merged = {**run_args, **own}
    for key in LIST_OPTIONS:
        if key in run_args and key in own:
            merged[key] = [*run_args[key], *own[key]]
    return merged


def container_view(options: Mapping[str, Any]) -> dict[str, Any]:
    """What a container gets, from its final create options, for people to review: every mount
    (run-argument `--mount`s, the cluster's mounts and the runtime's folders, whether docker
    keeps them as Mounts or Binds), every device, the environment and the command."""
    mounts = [
        f"{m.get('Source')} -> {m['Target']} ({'ro' if m.get('ReadOnly') else 'rw'}, {m['Type']})"
        for m in options.get("mounts", [])
    ]
    for bind in options.get("volumes", []):
        source, target, mode = str(bind).split(":")
        mounts.append(f"{source} -> {target} ({mode}, bind)")
    gpus = [
        "gpus: all" if request.get("Count") == -1 else f"gpus: {request.get('Count')}"
        for request in options.get("device_requests", [])
    ]
    shown = {"image", "name", "entrypoint", "command", "mounts", "volumes", "environment"}
    shown |= {"devices", "device_requests", "device_cgroup_rules", "labels", "detach"}
    return {
        "image": options.get("image"),
        "name": options.get("name"),
        "entrypoint": options.get("entrypoint", "the image's own"),
        "command": list(options.get("command", [])),
        "mounts": mounts,
        "devices": [*options.get("devices", []), *gpus],
        "device_cgroup_rules": list(options.get("device_cgroup_rules", [])),
        "environment": dict(sorted(dict(options.get("environment", {})).items())),
        "options": {key: value for key, value in options.items() if key not in shown},
    }


def container_state(inspect: Mapping[str, Any]) -> ContainerState:
    """A ContainerState from an inspect document (pure)."""
    state = inspect.get("State") or {}
    return ContainerState(
        id=str(inspect["Id"]),
        name=str(inspect.get("Name", "")).lstrip("/"),
        status=str(state.get("Status", "")),
        running=bool(state.get("Running")),
        exit_code=int(state.get("ExitCode") or 0),
        oom_killed=bool(state.get("OOMKilled")),
        error=str(state.get("Error") or ""),
        started_at=str(state.get("StartedAt", "")),
        finished_at=str(state.get("FinishedAt", "")),
        labels=dict((inspect.get("Config") or {}).get("Labels") or {}),
    )


def run_rank(client: docker.DockerClient, spec: RankContainer) -> ContainerState:
    """Create and start the rank's container; a stopped leftover of sparkgate's is replaced."""
    leftover = inspect_rank(client, spec.name)
    if leftover is not None:
        refuse_leftover(spec, leftover)
        remove_rank(client, spec.name)
    try:
        container = client.containers.create(**create_options(spec))
        container.start()
    except APIError as exc:
        with contextlib.suppress(APIError):
            remove_rank(client, spec.name)
        raise BootError(
            f"node {spec.node} rank {spec.rank}: cannot start container {spec.name} from "
            f"{spec.image}: {exc.explanation or exc}"
        ) from exc
    state = inspect_rank(client, spec.name)
    if state is None:
        raise BootError(f"node {spec.node} rank {spec.rank}: container {spec.name} vanished")
    return state


def refuse_leftover(spec: RankContainer, leftover: ContainerState) -> None:
    """BootError unless the container of the rank's name is a stopped one sparkgate made.

    Production and qualification share container names (the recipe names its container in its
    cluster file, e.g. `dsv41-karmic-kraken`, and `cluster start --replace` keeps the previous
    one stopped under another name to roll back to): a stopped container without sparkgate's
    label is the operator's, and removing it would destroy their rollback.
    """
    where = f"node {spec.node} rank {spec.rank}: container {spec.name}"
    if leftover.labels.get(LABEL) != "rank":
        raise BootError(
            f"{where} exists and was not created by sparkgate (no {LABEL} label): it is the "
            "operator's (a production container?); stop it with the operator's own command, "
            "or rename or remove it yourself, then start again"
        )
    if leftover.running:
        raise BootError(f"{where} is already running (stop the cluster first)")


def inspect_rank(client: docker.DockerClient, name: str) -> ContainerState | None:
    """The container's state, or None when there is no such container."""
    document = inspect_document(client, name)
    return None if document is None else container_state(document)


def inspect_document(client: docker.DockerClient, name: str) -> dict[str, Any] | None:
    """The full `docker inspect` document (for evidence folders), or None without a container."""
    try:
        return dict(client.api.inspect_container(name))
    except NotFound:
        return None


def wait_rank(client: docker.DockerClient, name: str, timeout: float) -> int:
    """Block until the container exits; its exit code (for one-shot commands such as tests)."""
    try:
        result = client.api.wait(name, timeout=timeout)
    except RequestException as exc:
        raise BootError(f"container {name} still runs after {timeout:.0f} s") from exc
    return int(result.get("StatusCode", -1))


def run_once(client: docker.DockerClient, spec: RankContainer, timeout: float) -> tuple[int, str]:
    """Run a one-shot container to its end (model preparation, tests); exit code and output
    (without timestamps).

    The container is removed afterwards whatever happened, so a name is never left taken; a
    container of the name that is not sparkgate's is refused before anything is removed.
    """
    run_rank(client, spec)
    try:
        code = wait_rank(client, spec.name, timeout)
        output = client.api.logs(spec.name, stdout=True, stderr=True, timestamps=False)
        return code, bytes(output).decode(errors="replace")
    finally:
        remove_rank(client, spec.name)


def rank_logs(client: docker.DockerClient, name: str, tail: int | None = None) -> str:
    """The container's stdout and stderr, each line prefixed with its RFC 3339 timestamp."""
    raw = client.api.logs(name, stdout=True, stderr=True, timestamps=True, tail=tail or "all")
    return bytes(raw).decode(errors="replace")


def stop_rank(client: docker.DockerClient, name: str, grace_s: float = DEFAULT_GRACE_S) -> None:
    """Send the stop signal, wait grace_s, then kill; a missing container is already stopped."""
    with contextlib.suppress(NotFound):
        client.api.stop(name, timeout=max(0, round(grace_s)))


def remove_rank(client: docker.DockerClient, name: str) -> None:
    """Remove the container (killing it if it still runs); a missing one is fine."""
    with contextlib.suppress(NotFound):
        client.api.remove_container(name, force=True)


def cluster_containers(client: docker.DockerClient, cluster: str) -> list[ContainerState]:
    """Every rank container of the cluster on this daemon, running or not."""
    found = client.api.containers(all=True, filters={"label": f"{LABEL}.cluster={cluster}"})
    states = [inspect_rank(client, str(item["Id"])) for item in found]
    return [state for state in states if state is not None]


def remove_cluster(
    client: docker.DockerClient, cluster: str, grace_s: float = DEFAULT_GRACE_S
) -> list[str]:
    """Stop and remove every rank container of the cluster on this daemon; their names."""
    names = []
    for state in cluster_containers(client, cluster):
        if state.running:
            stop_rank(client, state.id, grace_s)
        remove_rank(client, state.id)
        names.append(state.name)
    return names
