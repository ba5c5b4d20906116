"""The docker runtime: ranks as containers of the release image, one per node's daemon.

A build is the release image, made once on the head's daemon and loaded on every other node
(`flows.cluster.build.release_image`); the model is prepared and the release tests run in
one-shot containers of that image.

This adapts the container functions of `flows.cluster.runtime.containers` to the `Runtime` protocol
the boot loop, the evidence capture and `sparkgate cluster stop|status|logs` use. A rank
container runs with host networking and its cache folders bind-mounted at the node's own paths,
so cold and warm boots are decided on the node's disk and `caches.py` empties them through the
transport as for processes. The image runs as a non-root user: before each start the rank's
folders are handed to that user by a one-shot root container (the SSH user need not be root).
A handle names the daemon and the container ID, so another process finds the very container.
"""

from __future__ import annotations

import contextlib
import threading
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import docker
from docker.errors import DockerException
from requests.exceptions import RequestException

from flows.cluster.boot.caches import CacheTarget, check_path, emptying_script
from flows.cluster.build.adopted_image import image_for
from flows.cluster.build.dockerfile import dockerfile_image
from flows.cluster.build.progress import ImageProgress, LineProgress
from flows.cluster.build.release_image import ImageBuild, build_for, distribute_for
from flows.cluster.runtime.base import (
    Build,
    Installed,
    NodeInstall,
    RankHandle,
    RankStatus,
    RuntimeKind,
)
from flows.cluster.runtime.containers import (
    BindMount,
    RankContainer,
    inspect_document,
    inspect_rank,
    plan_container,
    remove_rank,
    run_once,
    run_rank,
    stop_rank,
)
from flows.cluster.runtime.docker_tests import ImageTestHost
from flows.cluster.runtime.memory_guard import RankGuard, node_meminfo, refuse_below_startup
from flows.cluster.runtime.run_args import run_arg_options
from flows.cluster.transport.base import Transport
from flows.cluster.transport.docker_client import DockerEndpoint, connect
from flows.cluster.transport.factory import docker_ssh
from flows.errors import BootError, BuildError, ClusterError, TransportError
from flows.lines import LineSink
from flows.secrets import resolve_env
from flows.spec.cluster import Cluster, DockerRuntime, Node, SshTransport
from flows.spec.launch import LaunchPlan, fill_checked, placeholder_values, render_all
from flows.spec.release import Release
from flows.spec.template import fill

CHOWN_TIMEOUT_S = 120.0
FACT_TIMEOUT_S = 30.0
ROOT_USER = "0"


# -- pure: what a rank container looks like ------------------------------------------------------


def docker_spec(cluster: Cluster) -> DockerRuntime:
    """The cluster's docker runtime settings; ClusterError for a process cluster."""
    if not isinstance(cluster.runtime, DockerRuntime):
        raise ClusterError(f"cluster {cluster.name} runs ranks as processes, not in Docker")
    return cluster.runtime


def node_daemons(cluster: Cluster) -> dict[str, DockerEndpoint]:
    """Every node's daemon endpoint (the daemon template needs no release)."""
    runtime = docker_spec(cluster)
    user = cluster.transport.user if isinstance(cluster.transport, SshTransport) else ""
    return {
        node.name: DockerEndpoint(
            node=node.name,
            base_url=fill(
                node.overrides.docker_daemon or runtime.daemon,
                {"user": user, "address": node.address, "node": node.name, "rank": str(node.rank)},
            ),
            ssh=docker_ssh(cluster, node),
        )
        for node in cluster.nodes
    }


def rank_container(
    cluster: Cluster, release: Release, node: Node, plan: LaunchPlan, image: str
) -> RankContainer:
    """The container of one rank: plan folders plus the cluster's mounts and run_args (or, with
    `create_as: docker-run`, exactly what the operator's `docker run` would create)."""
    runtime = docker_spec(cluster)
    values = placeholder_values(cluster, release, node)
    parity = runtime.create_as == "docker-run"
    return plan_container(
        plan,
        cluster=cluster.name,
        image=image,
        name=fill(runtime.container_name, values),
        release=release.name,
        extra_mounts=cluster_mounts(cluster, release, node),
        options=run_arg_options(runtime.run_args),
        image_entrypoint=tuple(runtime.image_entrypoint) if parity else None,
    )


def cluster_mounts(cluster: Cluster, release: Release, node: Node) -> tuple[BindMount, ...]:
    """The cluster's bind mounts (model, caches) for a container on `node`, placeholders filled."""
    values = placeholder_values(cluster, release, node)
    return tuple(
        BindMount(
            source=fill_checked(m.source, values, f"runtime.mounts[{index}].source"),
            target=m.target,
            read_only=m.mode == "ro",
        )
        for index, m in enumerate(docker_spec(cluster).mounts)
    )


def host_path(mounts: Sequence[BindMount], container_path: str) -> str:
    """The node's path behind a container path (the deepest mount covering it), else itself."""
    inside = PurePosixPath(container_path)
    covering = [m for m in mounts if inside.is_relative_to(m.target)]
    if not covering:
        return container_path
    mount = max(covering, key=lambda m: len(PurePosixPath(m.target).parts))
    return str(PurePosixPath(mount.source) / inside.relative_to(mount.target))


def owned_folders(plan: LaunchPlan) -> list[str]:
    """Folders the container's user must be able to write: caches and the model's parent."""
    model_parent = str(PurePosixPath(plan.model_dir).parent)
    return list(dict.fromkeys([*plan.cache_dirs.values(), model_parent]))


def check_entrypoint(spec: RankContainer, image_config: Mapping[str, Any]) -> None:
    """BootError when the image's ENTRYPOINT is not the one the cluster declares: the command
    would then run under another program than the operator's `docker run` starts."""
    found = tuple(image_config.get("Entrypoint") or ())
    if found != spec.image_entrypoint:
        raise BootError(
            f"node {spec.node}: image {spec.image} has entrypoint {list(found)}, but the cluster "
            f"declares runtime.image_entrypoint {list(spec.image_entrypoint or ())}"
        )


def rank_status(document: Mapping[str, Any] | None) -> RankStatus:
    """A RankStatus from an inspect document (None: the container is gone)."""
    if document is None:
        return RankStatus(running=False, detail="container removed")
    state = document.get("State") or {}
    if state.get("Running"):
        return RankStatus(running=True)
    return RankStatus(
        running=False,
        exit_code=int(state.get("ExitCode") or 0),
        oom_killed=bool(state.get("OOMKilled")),
        detail=str(state.get("Error") or ""),
    )


# -- the runtime --------------------------------------------------------------------------------


class DockerRanks:
    """Ranks as containers on each node's daemon (the `Runtime` of docker clusters).

    `release` and `image` are needed to prepare and start ranks; status, logs, stop and inspect
    work from a handle alone, so `cluster stop` needs neither. `progress` observes the image's
    build steps and transfers (default: lines to the build's `say`).
    """

    kind: RuntimeKind = "docker"

    def __init__(
        self,
        cluster: Cluster,
        transports: Mapping[str, Transport],
        *,
        release: Release | None = None,
        image: str | None = None,
        state: Path | None = None,
        progress: ImageProgress | None = None,
    ) -> None:
        self._cluster = cluster
        self._state = state
        self._progress = progress
        self._transports = dict(transports)
        self._daemons = node_daemons(cluster)
        self._release = release
        self._image = image
        self._clients: dict[str, docker.DockerClient] = {}
        self._lock = threading.Lock()
        self._ended: dict[str, RankStatus] = {}
        self._guards: dict[str, RankGuard] = {}
        self._ready_url: str | None = None

    # -- the build and what is done with it ------------------------------------------------------

    def build(self, release: Release, say: LineSink) -> ImageBuild:
        """The release image: built (or reused) once on the head's daemon, or the operator's image
        (their build command run, or a prebuilt one) adopted."""
        if self._state is None:
            raise ClusterError("the docker runtime was made without a state folder to build in")
        self._release = release
        if release.build.kind == "dockerfile":
            return dockerfile_image(self._cluster, release, say)
        if release.build.makes_image:
            return image_for(self._cluster, release, self._transports, say, self._state)
        return build_for(self._cluster, release, self._state, self._progress_to(say))

    def install(
        self, build: Build, say: LineSink, *, nodes: Sequence[str] | None = None
    ) -> Installed:
        """Load the image on every other node, verify one image ID everywhere; ranks run it.

        Every node gets the image whatever `nodes` says: the transfer is one fan-out.
        """
        del nodes
        if not isinstance(build, ImageBuild):
            raise ClusterError(f"the docker runtime installs images, not {type(build).__name__}")
        release = self._need_release()
        copies = distribute_for(self._cluster, release, build, self._progress_to(say), say)
        self._image = build.built.tag
        verb = build.verb
        return Installed(
            runtime=self.kind,
            release=release.name,
            digest=build.built.image_id,
            image=build.built.tag,
            nodes=[
                NodeInstall(node=c.facts.node, reused=build.built.reused, verified=c)
                for c in copies
            ],
            summary=[f"{build.built.tag} {verb}", f"same image ID on {len(copies)} nodes"],
        )

    def _progress_to(self, say: LineSink) -> ImageProgress:
        """The observer given to this runtime, else one saying each step and transfer."""
        return self._progress if self._progress is not None else LineProgress(say)

    def empty_caches(self, targets: Sequence[CacheTarget]) -> None:
        """Empty the cache folders as root, in a one-shot container of the release image.

        The engine in the image writes its caches as the image's user, root for the recipe
        (its Dockerfile ends `USER root`), so the SSH user's `rm -rf` on the node would fail on
        them. Each folder's parent is mounted at its own path so the folder itself is removed
        and re-created.
        """
        by_node: dict[str, list[str]] = {}
        for target in targets:
            check_path(target)
            by_node.setdefault(target.node, []).append(target.path)
        for node, paths in by_node.items():
            parents = list(dict.fromkeys(str(PurePosixPath(p).parent) for p in paths))
            self._node(node).run(["mkdir", "-p", "--", *parents], check=True)
            code, output = self.one_shot(
                node, "empty-caches", emptying_script(paths), parents, CHOWN_TIMEOUT_S,
                user=ROOT_USER,
            )  # fmt: skip
            if code != 0:
                raise ClusterError(f"node {node}: cannot empty caches {paths}: {output[-400:]}")

    def node_facts(self, node: Node, values: Mapping[str, str]) -> dict[str, object]:
        """The version of the node's docker daemon (an error when it does not answer)."""
        url = fill(node.overrides.docker_daemon or docker_spec(self._cluster).daemon, values)
        try:
            return {"docker_version": daemon_version(node.name, url)}
        except TransportError as failure:
            return {"docker_error": str(failure)}
        except (DockerException, RequestException, OSError, KeyError) as failure:
            return {"docker_error": f"docker daemon {url}: {failure}"}

    def release_tests(self, node: str, installed: Installed, say: LineSink) -> ImageTestHost:
        """The release image on the node, ready to list and run its tests."""
        if installed.image is None:
            raise ClusterError(f"node {node}: no release image installed")
        self._image = installed.image
        plan = next(p for p in render_all(self._cluster, self._need_release()) if p.node == node)
        return ImageTestHost(
            self, self._node(node), python=self._cluster.runtime.python,
            workdir=self._cluster.node(node).state_folder, say=say,
            tree=self._cluster.engine.tests_root, env=plan.env,
        )  # fmt: skip

    # -- ranks -------------------------------------------------------------------------------------

    def prepare(self, plan: LaunchPlan) -> None:
        """Create the rank's folders on the node and hand them to the image's user."""
        transport = self._node(plan.node)
        folders = owned_folders(plan)
        transport.run(["mkdir", "-p", "--", plan.workdir, plan.cwd, *folders], check=True)
        self.hand_over(plan.node, folders)

    def hand_over(self, node: str, folders: Sequence[str]) -> None:
        """chown the folders (not their contents) to the image's user, in a root container."""
        user = str(self.client(node).api.inspect_image(self._need_image())["Config"].get("User"))
        if user in ("", "None", "0", "root"):
            return
        code, output = self.one_shot(
            node, "chown", ["chown", "--", user, *folders], folders, CHOWN_TIMEOUT_S, user=ROOT_USER
        )
        if code != 0:
            raise ClusterError(f"node {node}: cannot hand {list(folders)} to {user}: {output}")

    def model_on_node(self, plan: LaunchPlan) -> str:
        """The host side of the mount that holds the model directory (the recipe bind-mounts
        the HF cache snapshot of the pinned revision at /models); the plan's path when no
        mount covers it."""
        node = self._cluster.node(plan.node)
        return host_path(cluster_mounts(self._cluster, self._need_release(), node), plan.model_dir)

    def prepare_model(self, plan: LaunchPlan, timeout: float) -> None:
        """Run the profile's model preparation in a one-shot container of the release image."""
        if not plan.model_prepare:
            raise BuildError(f"{plan.node}: no model at {plan.model_dir} and no model_prepare")
        parent = str(PurePosixPath(plan.model_dir).parent)
        self._node(plan.node).run(["mkdir", "-p", "--", parent], check=True)
        self.hand_over(plan.node, [parent])
        code, output = self.one_shot(
            plan.node, "model", plan.model_prepare, [parent], timeout, env=resolve_env(plan.env)
        )
        if code != 0:
            raise BuildError(f"{plan.node}: model preparation failed: {output[-800:]}")

    def one_shot(
        self,
        node: str,
        label: str,
        argv: Sequence[str],
        folders: Sequence[str],
        timeout: float,
        *,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        with_run_args: bool = False,
    ) -> tuple[int, str]:
        """Run argv to its end in a container of the release image on the node, with `folders`
        mounted at their own paths (and the cluster's run_args when asked); exit code and
        output (BootError past the timeout)."""
        options = run_arg_options(docker_spec(self._cluster).run_args) if with_run_args else {}
        extra = (
            cluster_mounts(self._cluster, self._release, self._cluster.node(node))
            if with_run_args and self._release is not None
            else ()
        )
        spec = RankContainer(
            cluster=self._cluster.name,
            node=node,
            rank=self._cluster.node(node).rank,
            image=self._need_image(),
            name=f"{self._cluster.name}-{node}-{label}",
            argv=tuple(argv),
            env=dict(env or {}),
            mounts=(*(BindMount(source=path, target=path) for path in folders), *extra),
            user=user,
            options=options,
        )
        return run_once(self.client(node), spec, timeout)

    def start(self, plan: LaunchPlan) -> RankHandle:
        """Create and start the rank's container from the release image."""
        if self._release is None:
            raise ClusterError(f"node {plan.node}: no release given to start a container of")
        resolved = plan.model_copy(update={"env": resolve_env(plan.env)})  # the handle keeps refs
        node = self._cluster.node(plan.node)
        spec = rank_container(self._cluster, self._release, node, resolved, self._need_image())
        client = self.client(plan.node)
        if spec.image_entrypoint is not None:
            check_entrypoint(spec, client.api.inspect_image(spec.image)["Config"])
        self._refuse_short_memory(plan)
        started = datetime.now(UTC)
        state = run_rank(client, spec)
        self._guard(plan, client, state.id)
        return RankHandle.started(
            "docker", plan, started, container=state.name, container_id=state.id,
            daemon=self._daemons[plan.node].base_url, image=spec.image,
        )  # fmt: skip

    def _refuse_short_memory(self, plan: LaunchPlan) -> None:
        """BootError when the node is already below the startup memory guard."""
        settings = docker_spec(self._cluster).memory_guard
        if settings is None:
            return
        refuse_below_startup(self._node(plan.node), settings, plan.node, plan.rank)

    def _guard(self, plan: LaunchPlan, client: docker.DockerClient, container: str) -> None:
        """Watch the started rank's node memory until it is stopped (startup, then steady)."""
        settings = docker_spec(self._cluster).memory_guard
        if settings is None:
            return
        if plan.head and plan.ready_url:
            self._ready_url = plan.ready_url
        transport = self._node(plan.node)

        def kill() -> None:
            with contextlib.suppress(DockerException, RequestException):
                client.api.kill(container, signal="KILL")

        read = lambda: node_meminfo(transport)  # noqa: E731 - read when checked
        guard = RankGuard(settings, read=read, kill=kill, ready=self._api_ready)
        self._guards[container] = guard.start()

    def _api_ready(self) -> bool:
        """Whether the head's API answers (the guards switch to their steady threshold)."""
        if self._ready_url is None:
            return False
        try:
            with urllib.request.urlopen(self._ready_url, timeout=2) as answer:  # noqa: S310
                return bool(answer.status == 200)
        except (OSError, ValueError):
            return False

    def status(self, handle: RankHandle) -> RankStatus:
        """From `docker inspect`; a container this runtime stopped and removed keeps its end,
        and one its memory guard killed says so."""
        document = inspect_document(self._client_of(handle), _target(handle))
        if document is None and _target(handle) in self._ended:
            return self._ended[_target(handle)]
        status = rank_status(document)
        guard = self._guards.get(handle.container_id or "")
        if not status.running and guard is not None and guard.tripped:
            return status.model_copy(update={"detail": guard.tripped})
        return status

    def read_log(self, handle: RankHandle, offset: int = 0) -> str:
        """`docker logs --timestamps` from byte `offset` on ("" once the container is gone)."""
        client = self._client_of(handle)
        if inspect_rank(client, _target(handle)) is None:
            return ""
        raw = client.api.logs(_target(handle), stdout=True, stderr=True, timestamps=True)
        return bytes(raw)[offset:].decode(errors="replace")

    def settle(self, handles: Sequence[RankHandle]) -> None:
        """Nothing to wait for: a rank is started once its container is."""

    def stop(self, handle: RankHandle) -> RankStatus:
        """The profile's stop signal (set on the container), its grace, a kill, then remove."""
        client = self._client_of(handle)
        guard = self._guards.pop(handle.container_id or "", None)
        if guard is not None:
            guard.stop()
        stop_rank(client, _target(handle), handle.plan.stop_grace_s)
        ended = self.status(handle)
        remove_rank(client, _target(handle))
        self._ended[_target(handle)] = ended
        return ended

    def inspect(self, handle: RankHandle) -> dict[str, Any]:
        """The full `docker inspect` document plus the status."""
        document = inspect_document(self._client_of(handle), _target(handle))
        return {
            "container": handle.container,
            "status": self.status(handle).model_dump(),
            "inspect": document,
        }

    def client(self, node: str) -> docker.DockerClient:
        """The node's daemon client (one per node, made on first use)."""
        return self._connect(self._endpoint(node))

    def close(self) -> None:
        """Stop the memory guards and close every daemon client."""
        for guard in self._guards.values():
            guard.stop()
        self._guards.clear()
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()

    def _client_of(self, handle: RankHandle) -> docker.DockerClient:
        if handle.daemon is None:
            return self.client(handle.node)
        known = self._daemons.get(handle.node)
        if known is not None and known.base_url == handle.daemon:
            return self._connect(known)  # with the cluster's ssh settings
        return self._connect(DockerEndpoint(node=handle.node, base_url=handle.daemon))

    def _connect(self, endpoint: DockerEndpoint) -> docker.DockerClient:
        with self._lock:
            if endpoint.base_url not in self._clients:
                self._clients[endpoint.base_url] = connect(endpoint)
            return self._clients[endpoint.base_url]

    def _endpoint(self, node: str) -> DockerEndpoint:
        try:
            return self._daemons[node]
        except KeyError:
            raise TransportError(f"no docker daemon for node {node}") from None

    def _node(self, name: str) -> Transport:
        try:
            return self._transports[name]
        except KeyError:
            raise TransportError(f"no transport for node {name}") from None

    def _need_release(self) -> Release:
        if self._release is None:
            raise ClusterError(f"cluster {self._cluster.name}: no release given to install")
        return self._release

    def _need_image(self) -> str:
        if self._image is None:
            raise ClusterError(f"cluster {self._cluster.name}: no release image to run")
        return self._image


def daemon_version(node: str, url: str) -> str:
    """The docker version a node's daemon reports."""
    client = connect(DockerEndpoint(node=node, base_url=url), timeout=int(FACT_TIMEOUT_S))
    try:
        return str(client.version()["Version"])
    finally:
        client.close()


def _target(handle: RankHandle) -> str:
    """The container to act on: its ID (a later container of the same name is another one)."""
    target = handle.container_id or handle.container
    if target is None:
        raise ClusterError(f"node {handle.node} rank {handle.rank}: handle names no container")
    return target
