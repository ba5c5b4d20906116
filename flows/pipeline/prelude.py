"""What every run on a cluster does first: connect, take the cluster, check, build, install, record.

Qualify, calibrate and the promotion deploy all start the same way; `held_cluster` is the part
every one of them needs (a transport to every node, the cluster's concurrency slot and its lock)
and `prepared_cluster` adds what a measured run needs on top (preflight, the build made once,
installed and verified on every node, the gates' context and an open record). Each step is
reported to a `StageObserver` as a stage (lock, preflight, build, distribute). Before each stage
the lock is checked on the head (`ensure_held`): a run whose lock was taken over stops with
LockLostError instead of driving a cluster another run now owns. Import this module only after
`flows.settings.prefect_environment()`.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from flows import __version__
from flows.bench.hosts import FACTS_FILE, HostFacts
from flows.cluster.build.adopted_image import ReleaseBuild, resumed_image, run_release
from flows.cluster.build.wheel import build_release
from flows.cluster.ops.lock import ClusterLock, ensure_held, lock_settings
from flows.cluster.ops.preflight import PreflightReport, run_preflight
from flows.cluster.runtime.factory import runtime_for
from flows.cluster.transport.base import Transport
from flows.cluster.transport.factory import TransportPool
from flows.gates.base import GateContext
from flows.lines import LineSink
from flows.pipeline.schedule import cluster_slot
from flows.record import open_record
from flows.record.reader import unfinished_build
from flows.record.writer import RecordWriter
from flows.settings import project_root, state_dir
from flows.spec.cluster import Cluster
from flows.spec.release import Release
from flows.stages import StageObserver


@dataclass(frozen=True)
class HeldCluster:
    """A cluster this run holds: its transports, under the slot and the lock."""

    pool: TransportPool
    transports: dict[str, Transport]


@dataclass(frozen=True)
class PreparedCluster:
    """A held cluster with the release built, installed everywhere, and a record open."""

    held: HeldCluster
    build: ReleaseBuild
    context: GateContext
    record: RecordWriter


@contextmanager
def held_cluster(
    cluster: Cluster, *, command: str, observer: StageObserver, slot: bool = True
) -> Iterator[HeldCluster]:
    """Transports to every node, then the cluster's concurrency slot and lock (stage `lock`).

    The slot is a no-op in embedded mode; `slot=False` takes the lock alone.
    """
    with TransportPool(cluster) as pool:
        transports = {node.name: pool.node(node.name) for node in cluster.nodes}
        observer.started("lock")
        lock = ClusterLock(pool.head, lock_settings(cluster), command=command)
        with (
            cluster_slot(cluster.name, command=command) if slot else nullcontext(),
            lock,
            lock.current(),
        ):
            observer.finished("lock", "passed", cluster.head.name)
            yield HeldCluster(pool=pool, transports=transports)


@contextmanager
def prepared_cluster(
    release: Release,
    cluster: Cluster,
    *,
    previous: Release | None,
    command: str,
    observer: StageObserver,
    records: Path | None = None,
    resume: bool = True,
) -> Iterator[PreparedCluster]:
    """Hold the cluster, preflight it, build and install the release, open its record.

    The release must already be checked to fit the cluster (`flows.pipeline.inputs`, or the
    caller's own `check_fits`): this only runs it. `records` is the folder the record opens in
    (experiments/ unless given); with `resume` an unfinished record of the same build is
    reopened.
    """
    state = state_dir()
    experiments = project_root() / "experiments"
    say = observer.note
    with held_cluster(cluster, command=command, observer=observer) as held:
        ensure_held()
        observer.started("preflight")
        preflight = preflight_task(cluster, held.pool)
        observer.finished("preflight", "passed", preflight_line(preflight))
        ensure_held()
        observer.started("build")
        resumed = resumed_image(
            release,
            unfinished_build(records or experiments, release.name, cluster.name)
            if resume
            else None,
        )
        if resumed is not None:
            say(f"resuming with the image the build command made: {resumed.build.image}")
        build = build_task(
            resumed or release, cluster, transports=held.transports, state=state, say=say
        )
        if resumed is not None:  # still the built image, adopted again by its ID
            build = build.model_copy(update={"origin": release.build.kind})
        observer.finished("build", "passed", build.short)
        runs = run_release(release, build)
        ensure_held()
        observer.started("distribute")
        installed = distribute_task(runs, cluster, transports=held.transports, state=state, say=say)
        observer.finished("distribute", "passed", "; ".join(installed))
        context = GateContext(
            cluster=cluster, release=runs, previous=previous, transports=held.transports,
            state=state, experiments=experiments, say=say, advance=observer.progressed,
        )  # fmt: skip
        record = open_record(
            records or experiments, release, build_digest=build.digest, cluster=cluster,
            previous=previous.name if previous else None, resume=resume,
        )  # fmt: skip
        ensure_held()
        record.save_json("build.json", build.model_dump(mode="json"))
        record.save_json(FACTS_FILE, preflight_facts(preflight).model_dump(mode="json"))
        say(f"record: {record.path}")
        yield PreparedCluster(held=held, build=build, context=context, record=record)


def versions() -> dict[str, str]:
    """The versions a published record names (sparkgate, Prefect, Python, platform)."""
    import prefect  # noqa: PLC0415

    return {
        "sparkgate": __version__,
        "prefect": prefect.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


# -- tasks ---------------------------------------------------------------------------------------


@task(name="preflight", cache_policy=NO_CACHE)
def preflight_task(cluster: Cluster, pool: TransportPool) -> PreflightReport:
    """Every node ready for a run; raises on any ERROR check."""
    report = run_preflight(cluster, lambda node: pool.node(node.name))
    report.raise_for_errors()
    return report


def preflight_line(report: PreflightReport) -> str:
    """The preflight stage's detail: how many checks, how many warnings."""
    warnings = [line for line in report.results if line.status == "WARN"]
    return f"{len(report.results)} checks, {len(warnings)} warnings"


def preflight_facts(report: PreflightReport) -> HostFacts:
    """The host facts preflight read, as the record keeps them (host-facts.json), so a user's
    cluster can later be set beside this record's (`sparkgate bench compare`)."""
    return HostFacts(
        cluster=report.cluster,
        source="preflight",
        read_utc=datetime.now(UTC).isoformat(timespec="seconds"),
        nodes=report.host_facts,
        errors=report.host_fact_errors,
    )


@task(name="build", cache_policy=NO_CACHE)
def build_task(
    release: Release, cluster: Cluster, *,
    transports: dict[str, Transport], state: Path, say: LineSink,
) -> ReleaseBuild:  # fmt: skip
    """Build the release once (content-addressed; reused when nothing changed).

    A source build's digest names it in the record and in promotion for either runtime: a docker
    image is built from the same source, lock and options (its tag carries the source digest).
    An image build (adopted, or made by the operator's command on the build node) is named by
    its image ID.
    """
    if release.build.makes_image:
        return runtime_for(cluster, transports, state, release=release).build(release, say)
    return build_release(release, state / "build-cache", say)


@task(name="distribute", cache_policy=NO_CACHE)
def distribute_task(
    release: Release, cluster: Cluster, *,
    transports: dict[str, Transport], state: Path, say: LineSink,
) -> list[str]:  # fmt: skip
    """Build the runtime's kind of the release (reused when unchanged), put it on every node.

    The wheel that `build_task` made names the release in the record and in promotion whatever
    the runtime; the runtime builds what it runs (the same wheel, or a release image) and
    installs it. One line per node or image.
    """
    runtime = runtime_for(cluster, transports, state, release=release)
    return runtime.install(runtime.build(release, say), say).summary
