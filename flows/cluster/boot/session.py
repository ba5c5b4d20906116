"""Start a release on a cluster, remember what runs, and stop it again from any later command.

`start_release` is the composition root of a manual boot (and of every boot a gate makes):
build once, install the same build on every node, make sure each node has the model, empty the
caches a cold boot asks for, boot while watching every rank. What it started is saved as a
`ClusterSession` in the project's state folder, so `sparkgate cluster stop`, `status` and `logs`
in another process find the very ranks (pids or containers) that this one left running.

Nothing is orphaned by a start that does not finish: each rank is remembered in
`clusters/NAME.starting.json` the moment it starts, so even a killed driver leaves a file that
`load_session` (hence `cluster stop`) finds; and when a start fails or is interrupted after some
ranks started (the head refused after its workers came up), those ranks' evidence is captured
and they are stopped before the error is raised.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field

from flows.cluster.boot.caches import CacheTarget
from flows.cluster.boot.evidence import capture, evidence_folder
from flows.cluster.boot.timeline import BootTimeline
from flows.cluster.boot.watch import EventSink, boot, stop_all
from flows.cluster.runtime.base import RankHandle, RankStatus, Runtime, RuntimeKind
from flows.cluster.runtime.factory import runtime_for
from flows.cluster.runtime.process import ProcessRuntime
from flows.cluster.transport.base import Transport
from flows.errors import BootError, BuildError, ClusterError, SparkgateError
from flows.fileio import PRIVATE_MODE, write_text
from flows.lines import LineSink, silent
from flows.spec.cluster import Cluster
from flows.spec.launch import LaunchPlan, render_launch
from flows.spec.release import Release

__all__ = [
    "ClusterSession", "Prepared", "Started", "ensure_models", "forget_session", "load_session",
    "prepare_plans", "save_session", "session_file", "start_release", "starting_file",
    "stop_session",
]  # fmt: skip
MODEL_TIMEOUT_S = 600.0


class ClusterSession(BaseModel):
    """A release running on a cluster, as started by this project."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str
    release: str
    runtime: RuntimeKind
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


class StartingSession(BaseModel):
    """The ranks a start has launched so far; what is left of a start that never finished."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str
    release: str
    runtime: RuntimeKind
    started_at: datetime
    handles: list[RankHandle]


def starting_file(state: Path, cluster: str) -> Path:
    """Where the ranks of a start in progress are remembered, one by one."""
    return state / "clusters" / f"{cluster}.starting.json"


UNFINISHED = "unknown: the start did not finish"


def load_session(state: Path, cluster: str) -> ClusterSession | None:
    """The remembered session, or None when nothing was started (or it was stopped).

    A start that never finished (its driver was killed) counts: its ranks come back as a
    session whose build is UNFINISHED, so `cluster stop` stops them.
    """
    path = session_file(state, cluster)
    if path.is_file():
        return ClusterSession.model_validate_json(path.read_text())
    partial = starting_file(state, cluster)
    if not partial.is_file():
        return None
    left = StartingSession.model_validate_json(partial.read_text())
    return ClusterSession(
        cluster=left.cluster, release=left.release, runtime=left.runtime, build=UNFINISHED,
        started_at=left.started_at, handles=left.handles,
        timeline=BootTimeline(started_at=left.started_at, ready_s=None, ranks=[]),
    )  # fmt: skip


class _Remembering:
    """The runtime, remembering every rank it starts at once (in memory and in a file)."""

    def __init__(self, runtime: Runtime, remember: Callable[[list[RankHandle]], None]) -> None:
        self._runtime = runtime
        self._remember = remember
        self._lock = threading.Lock()
        self.started: list[RankHandle] = []

    def start(self, plan: LaunchPlan) -> RankHandle:
        handle = self._runtime.start(plan)
        with self._lock:
            self.started.append(handle)
            self._remember(list(self.started))
        return handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)


def save_session(state: Path, session: ClusterSession) -> Path:
    """Write the session atomically (a reader never sees half a file), its plans redacted:
    stopping, status and logs need pids and stop settings, never a secret."""
    path = session_file(state, session.cluster)
    handles = [
        handle.model_copy(update={"plan": handle.plan.redacted()}) for handle in session.handles
    ]
    text = session.model_copy(update={"handles": handles}).model_dump_json(indent=2)
    write_text(path, text, mode=PRIVATE_MODE)
    return path


def forget_session(state: Path, cluster: str) -> None:
    """Drop the remembered session (after every rank was stopped)."""
    session_file(state, cluster).unlink(missing_ok=True)


def prepare_plans(runtime: Runtime, cluster: Cluster, release: Release, say: LineSink) -> Prepared:
    """Build once and put the build on every node (a virtual environment, or the release
    image for docker); render each rank's plan with a fresh boot token shared by its ranks
    (the engine refuses a rendezvous peer without it)."""
    installed = runtime.install(runtime.build(release, say), say)
    nodes = sorted(cluster.nodes, key=lambda node: node.rank)
    token = secrets.token_urlsafe(32)
    plans = [
        render_launch(
            cluster, release, node, {"boot_token": token, **installed.launch_values(node.name)}
        )
        for node in nodes
    ]
    return Prepared(plans=plans, build=installed.digest, image=installed.image)


def ensure_models(
    plans: Sequence[LaunchPlan],
    transports: Mapping[str, Transport],
    say: LineSink = silent,
    runtime: Runtime | None = None,
) -> None:
    """Run the profile's model preparation on each node that has no model directory yet
    (by the runtime: on the node, or in a one-shot container of the release image).

    The model is looked for on the node's disk: for a container that is the host side of its
    mount (the recipe's `/models` is the node's HF cache snapshot of the pinned revision), not
    the container path, which need not exist on the host.
    """
    runtime = runtime or ProcessRuntime(transports)
    for plan in plans:
        on_node = runtime.model_on_node(plan)
        if transports[plan.node].run(["test", "-e", on_node], timeout=30).ok:
            continue
        where = on_node if on_node == plan.model_dir else f"{on_node} (mounted at {plan.model_dir})"
        if not plan.model_prepare:
            raise BuildError(
                f"node {plan.node}: no model at {where} and no model_prepare to make it"
            )
        say(f"{plan.node}: preparing the model at {where}")
        runtime.prepare_model(plan, MODEL_TIMEOUT_S)


def start_release(
    cluster: Cluster,
    release: Release,
    transports: Mapping[str, Transport],
    state: Path,
    *,
    empty: Sequence[CacheTarget] = (),
    on_event: EventSink | None = None,
    say: LineSink = silent,
) -> Started:
    """Build, install, prepare models, empty caches, boot; remember the running session."""
    runtime = runtime_for(cluster, transports, state, release=release)
    prepared = prepare_plans(runtime, cluster, release, say)
    plans = prepared.plans
    for plan in plans:
        transports[plan.node].run(["mkdir", "-p", "--", plan.workdir], timeout=30, check=True)
    ensure_models(plans, transports, say, runtime)
    runtime.empty_caches(empty)
    began = datetime.now(UTC)
    partial = starting_file(state, cluster.name)

    def remember(handles: list[RankHandle]) -> None:
        left = StartingSession(
            cluster=cluster.name, release=release.name, runtime=runtime.kind,
            started_at=began,
            handles=[h.model_copy(update={"plan": h.plan.redacted()}) for h in handles],
        )  # fmt: skip
        write_text(partial, left.model_dump_json(indent=2), mode=PRIVATE_MODE)

    remembering = _Remembering(runtime, remember)
    try:
        result = boot(
            cluster.engine, plans, cast("Runtime", remembering), transports,
            evidence_root=state / "evidence" / cluster.name, on_event=on_event,
        )  # fmt: skip
    except BaseException as error:
        stopped = _stop_left_behind(
            cluster, runtime, remembering.started, transports=transports, state=state, error=error
        )
        if isinstance(error, SparkgateError) and stopped is not None:
            raise BootError(
                f"{error}; {stopped}", evidence=getattr(error, "evidence", None)
            ) from error
        raise
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
    partial.unlink(missing_ok=True)
    return Started(session=session, wall_s=result.wall_s)


def _stop_left_behind(
    cluster: Cluster,
    runtime: Runtime,
    started: Sequence[RankHandle],
    *,
    transports: Mapping[str, Transport],
    state: Path,
    error: BaseException,
) -> str | None:
    """After a failed start: capture and stop the ranks still running; what was done, if any.

    The starting file is dropped only when every rank is known stopped; otherwise it stays for
    `cluster stop`.
    """
    partial = starting_file(state, cluster.name)
    running = [handle for handle in started if _still_running(runtime, handle)]
    if not running:
        partial.unlink(missing_ok=True)
        return None
    folder = capture(
        evidence_folder(state / "evidence" / cluster.name, "partial-start"), runtime, running,
        transports, cause=f"start did not finish: {error!r}",
    )  # fmt: skip
    stop_all(runtime, running)
    if any(_still_running(runtime, handle) for handle in running):
        return (
            f"{len(running)} rank(s) it had started did not stop; `sparkgate cluster stop` "
            f"(evidence: {folder})"
        )
    partial.unlink(missing_ok=True)
    return f"stopped {len(running)} rank(s) it had started (evidence: {folder})"


def _still_running(runtime: Runtime, handle: RankHandle) -> bool:
    try:
        return runtime.status(handle).running
    except SparkgateError:
        return True  # unknown: keep it remembered


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
    starting_file(state, cluster.name).unlink(missing_ok=True)
    return statuses
