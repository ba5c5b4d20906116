"""Start a release on a cluster, remember what runs, and stop it again from any later command.

`start_release` is the composition root of a manual boot (and of every boot a gate makes):
build once, install the same build on every node, make sure each node has the model, empty the
caches a cold boot asks for, boot while watching every rank. What it started is saved as a
`ClusterSession` in the project's state folder, so `sparkgate cluster stop`, `status` and `logs`
in another process find the very ranks (pids or containers) that this one left running.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from flows.cluster.boot.caches import CacheTarget, empty_caches
from flows.cluster.boot.timeline import BootTimeline
from flows.cluster.boot.watch import EventSink, boot, stop_all
from flows.cluster.build.wheel import build_release, install_everywhere
from flows.cluster.runtime.base import ProcessRuntime, RankHandle, RankStatus, Runtime
from flows.cluster.transport.base import Transport
from flows.errors import BuildError, ClusterError
from flows.spec.cluster import Cluster
from flows.spec.launch import LaunchPlan, render_all, render_launch
from flows.spec.release import Release

Progress = Callable[[str], None]
MODEL_TIMEOUT_S = 600.0


class ClusterSession(BaseModel):
    """A release running on a cluster, as started by this project."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str
    release: str
    runtime: Literal["process", "docker"]
    build: str = Field(description="Digest of the build (docker: image ID) every node runs.")
    image: str | None = Field(default=None, description="Release image tag (docker runtime).")
    started_at: datetime
    handles: list[RankHandle]
    timeline: BootTimeline
    emptied: list[CacheTarget] = Field(default=[], description="Caches emptied before the boot.")


class Prepared(BaseModel):
    """What a boot runs: each rank's plan, the build digest and, for docker, the image tag."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    plans: list[LaunchPlan]
    build: str
    image: str | None = None


class Started(BaseModel):
    """What `start_release` returns: the session and the boot's wall time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session: ClusterSession
    wall_s: float


def session_file(state: Path, cluster: str) -> Path:
    """Where the running session of a cluster is remembered."""
    return state / "clusters" / f"{cluster}.json"


def load_session(state: Path, cluster: str) -> ClusterSession | None:
    """The remembered session, or None when nothing was started (or it was stopped)."""
    path = session_file(state, cluster)
    if not path.is_file():
        return None
    return ClusterSession.model_validate_json(path.read_text())


def save_session(state: Path, session: ClusterSession) -> Path:
    """Write the session atomically (a reader never sees half a file)."""
    path = session_file(state, session.cluster)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(session.model_dump_json(indent=2))
    partial.replace(path)
    return path


def forget_session(state: Path, cluster: str) -> None:
    """Drop the remembered session (after every rank was stopped)."""
    session_file(state, cluster).unlink(missing_ok=True)


def runtime_for(
    cluster: Cluster,
    transports: Mapping[str, Transport],
    *,
    release: Release | None = None,
    image: str | None = None,
) -> Runtime:
    """The runtime the cluster file asks for; docker starts need the release and its image."""
    if cluster.runtime.kind == "process":
        return ProcessRuntime(dict(transports))
    from flows.cluster.runtime.docker import DockerRanks  # noqa: PLC0415 - docker SDK on demand

    return DockerRanks(cluster, transports, release=release, image=image)


def prepare_plans(
    cluster: Cluster,
    release: Release,
    transports: Mapping[str, Transport],
    state: Path,
    progress: Progress | None = None,
) -> Prepared:
    """Build once and put the build on every node (a virtual environment, or the release
    image for docker); render each rank's plan."""
    if cluster.runtime.kind == "docker":
        from flows.cluster.build.docker_release import release_image_for  # noqa: PLC0415

        image = release_image_for(cluster, release, state, progress)
        plans = render_all(cluster, release)
        return Prepared(plans=plans, build=image.built.image_id, image=image.built.tag)
    build = build_release(release, state / "build-cache", progress)
    workdirs = {node.name: node.workdir for node in cluster.nodes}
    envs = install_everywhere(
        build, transports, workdirs, base_python=cluster.runtime.python, progress=progress
    )
    nodes = sorted(cluster.nodes, key=lambda node: node.rank)
    plans = [
        render_launch(cluster, release, node, {"python": envs[node.name].python}) for node in nodes
    ]
    return Prepared(plans=plans, build=build.digest)


def ensure_models(
    plans: Sequence[LaunchPlan],
    transports: Mapping[str, Transport],
    progress: Progress | None = None,
    runtime: Runtime | None = None,
) -> None:
    """Run the profile's model preparation on each node that has no model directory yet
    (docker: in a one-shot container of the release image)."""
    for plan in plans:
        transport = transports[plan.node]
        if transport.run(["test", "-e", plan.model_dir], timeout=30).ok:
            continue
        if not plan.model_prepare:
            raise BuildError(f"{plan.node}: no model at {plan.model_dir} and no model_prepare")
        if progress:
            progress(f"{plan.node}: preparing the model at {plan.model_dir}")
        if runtime is not None and runtime.kind == "docker":
            from flows.cluster.runtime.docker import DockerRanks  # noqa: PLC0415

            assert isinstance(runtime, DockerRanks)
            runtime.prepare_model(plan, MODEL_TIMEOUT_S)
            continue
        result = transport.run(plan.model_prepare, timeout=MODEL_TIMEOUT_S, cwd=plan.cwd)
        if not result.ok:
            raise BuildError(
                f"{plan.node}: model preparation failed: {(result.stderr or result.stdout)[-800:]}"
            )


def start_release(
    cluster: Cluster,
    release: Release,
    transports: Mapping[str, Transport],
    state: Path,
    *,
    empty: Sequence[CacheTarget] = (),
    on_event: EventSink | None = None,
    progress: Progress | None = None,
) -> Started:
    """Build, install, prepare models, empty caches, boot; remember the running session."""
    prepared = prepare_plans(cluster, release, transports, state, progress)
    plans = prepared.plans
    runtime = runtime_for(cluster, transports, release=release, image=prepared.image)
    for plan in plans:
        transports[plan.node].run(["mkdir", "-p", "--", plan.workdir], timeout=30, check=True)
    ensure_models(plans, transports, progress, runtime)
    empty_caches(transports, empty)
    result = boot(
        cluster.engine, plans, runtime, transports,
        evidence_root=state / "evidence" / cluster.name, on_event=on_event,
    )  # fmt: skip
    session = ClusterSession(
        cluster=cluster.name,
        release=release.name,
        runtime=runtime.kind,
        build=prepared.build,
        image=prepared.image,
        started_at=datetime.now(UTC),
        handles=result.handles,
        timeline=result.timeline,
        emptied=list(empty),
    )
    save_session(state, session)
    return Started(session=session, wall_s=result.wall_s)


def stop_session(
    cluster: Cluster, session: ClusterSession, transports: Mapping[str, Transport], state: Path
) -> list[RankStatus]:
    """Stop every rank of the session and forget it; how each rank ended."""
    runtime = runtime_for(cluster, transports)
    stop_all(runtime, session.handles)
    statuses = [runtime.status(handle) for handle in session.handles]
    if any(status.running for status in statuses):
        raise ClusterError(f"cluster {cluster.name}: some ranks still run after stop")
    forget_session(state, cluster.name)
    return statuses
