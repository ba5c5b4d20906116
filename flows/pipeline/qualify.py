"""The release qualification as a Prefect flow: lock, preflight, build once, gates, record.

Each stage is a thin Prefect task over a plain function. Gates run in order and stop at the first
failure (later gates are not blamed); each gate's result is written into the experiments record
the moment it finishes, and a gate that passed is cached by Prefect under a key covering the
build digest, the resolved cluster, its settings and the record, so running the same command
again after a failure or Ctrl-C resumes at the first gate without a result (`fresh=True` starts
over). The record is published (README verdict first) before the flow ends; the flow ends Failed
when any gate failed. Import this module only after `flows.settings.prefect_environment()`.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State
from prefect.states import Failed
from pydantic import BaseModel, ConfigDict

from flows import __version__
from flows.cluster.build.wheel import ProcessBuild, build_release, install_everywhere
from flows.cluster.ops.lock import ClusterLock, lock_settings
from flows.cluster.ops.preflight import run_preflight
from flows.cluster.transport.base import Transport
from flows.cluster.transport.factory import TransportPool
from flows.gates.base import GateContext
from flows.pipeline.gate_loop import run_gates
from flows.pipeline.promote import decide_promotion
from flows.pipeline.schedule import cluster_slot
from flows.pipeline.stages import GATES, QUALIFIED, verdict
from flows.record import open_record, write_index
from flows.settings import project_root, state_dir
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release, load_previous, load_release
from flows.ui.board import StageBoard, current_board

RESULTS_DIR = "prefect-results"


class QualifyOutcome(BaseModel):
    """What a qualification ended with: the verdict and where its record is."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    release: str
    verdict: str
    failed_gate: str | None
    record: str
    gates: dict[str, str]
    stages: dict[str, str] = {}
    seconds: dict[str, float]
    promotion: str = ""


def load_release_and_previous(path: Path | str) -> tuple[Release, Release | None]:
    """The release and, when it names one, its previous release (a sibling file)."""
    release = load_release(path)
    return release, load_previous(path, release)


# -- tasks ---------------------------------------------------------------------------------------


@task(name="preflight", cache_policy=NO_CACHE)
def preflight_task(cluster: Cluster, pool: TransportPool) -> str:
    """Every node ready for a run; raises on any ERROR check."""
    report = run_preflight(cluster, lambda node: pool.node(node.name))
    report.raise_for_errors()
    warnings = [line for line in report.results if line.status == "WARN"]
    return f"{len(report.results)} checks, {len(warnings)} warnings"


@task(name="build", cache_policy=NO_CACHE)
def build_task(release: Release, state: Path, say: Callable[[str], None]) -> ProcessBuild:
    """Build the release once (content-addressed; reused when nothing changed).

    Its digest names the build in the record and in promotion for either runtime: a docker
    image is built from the same source, lock and options (its tag carries the source digest).
    """
    return build_release(release, state / "build-cache", say)


@task(name="distribute", cache_policy=NO_CACHE)
def distribute_task(
    build: ProcessBuild, release: Release, cluster: Cluster, *,
    transports: dict[str, Transport], state: Path, say: Callable[[str], None],
) -> list[str]:  # fmt: skip
    """Put the build on every node and verify it: the same distributions in every virtual
    environment, or (docker) the release image built once and one image ID on every node."""
    if cluster.runtime.kind == "docker":
        from flows.cluster.build.docker_release import release_image_for  # noqa: PLC0415

        image = release_image_for(cluster, release, state, say)
        verb = "reused" if image.built.reused else "built"
        same = f"same image ID on {len(image.nodes) + 1} nodes"
        return [f"{image.built.tag} {verb}", same]
    workdirs = {node.name: node.workdir for node in cluster.nodes}
    envs = install_everywhere(
        build, transports, workdirs, base_python=cluster.runtime.python, progress=say
    )
    return [f"{env.node}: {'reused' if env.reused else 'installed'}" for env in envs.values()]


# -- the flow ------------------------------------------------------------------------------------


@flow(name="qualify-release", validate_parameters=False)
def qualify_flow(
    release_file: str, cluster_file: str, fresh: bool = False, wait: bool = True
) -> QualifyOutcome | State[QualifyOutcome]:
    """Qualify a release on a cluster, publish its record, then wait for a promotion decision.

    With `wait=False` a passing release ends "awaiting promotion" (`sparkgate promote` later).
    """
    release, previous = load_release_and_previous(release_file)
    cluster = load_model(cluster_file, Cluster)
    state = state_dir()
    experiments = project_root() / "experiments"
    view = current_board.get() or StageBoard(_null_console(), release.name)
    say = view.note
    view.finish("validate", "passed", f"{release.name} on {cluster.name}")
    with TransportPool(cluster) as pool:
        transports = {node.name: pool.node(node.name) for node in cluster.nodes}
        view.start("lock")
        lock = ClusterLock(pool.head, lock_settings(cluster), command=_command(release_file))
        with cluster_slot(cluster.name), lock:  # the slot is a no-op in embedded mode
            view.finish("lock", "passed", f"{cluster.head.name}")
            view.start("preflight")
            view.finish("preflight", "passed", preflight_task(cluster, pool))
            view.start("build")
            build = build_task(release, state, say)
            view.finish("build", "passed", build.short)
            view.start("distribute")
            installed = distribute_task(
                build, release, cluster, transports=transports, state=state, say=say
            )
            view.finish("distribute", "passed", "; ".join(installed))
            context = GateContext(
                cluster=cluster, release=release, previous=previous, transports=transports,
                state=state, experiments=experiments, progress=say, advance=view.advance,
            )  # fmt: skip
            record = open_record(
                experiments, release, build_digest=build.digest, cluster=cluster,
                previous=previous.name if previous else None, resume=not fresh,
            )  # fmt: skip
            record.save_json("build.json", build.model_dump(mode="json"))
            say(f"record: {record.path}")
            results = run_gates(context, record, build.digest, fresh=fresh, view=view)
    text, failed = verdict(results)
    view.start("verdict")
    view.finish("verdict", "passed" if text == QUALIFIED else "failed", text)
    view.start("record")
    published = record.publish(
        verdict=text, stage_order=list(GATES), versions=_versions(), notes=""
    )
    write_index(experiments)
    _artifact(release.name, published)
    view.finish("record", "passed", str(published))
    outcome = QualifyOutcome(
        release=release.name,
        verdict=text,
        failed_gate=failed,
        record=str(published),
        gates={gate: result.outcome.value for gate, result in results.items()},
        stages=view.statuses(),
        seconds=view.seconds(),
    )
    if failed is not None:  # the flow ends Failed, with the outcome for the caller's summary
        return Failed(message=f"{release.name} {text} (record: {published})", data=outcome)
    decided = decide_promotion(release_file, release, published, wait=wait, progress=say)
    return outcome.model_copy(update={"promotion": decided})


def _versions() -> dict[str, str]:
    import prefect  # noqa: PLC0415

    return {
        "sparkgate": __version__,
        "prefect": prefect.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def _artifact(release: str, published: Path) -> None:
    readme = published / "README.md"
    if not readme.is_file():
        return
    key = "record-" + "".join(c if c.isalnum() else "-" for c in release.lower())
    create_markdown_artifact(readme.read_text(), key=key, description=f"record of {release}")


def _command(release_file: str) -> str:
    return f"sparkgate qualify {release_file}"


def _null_console() -> Any:
    from rich.console import Console  # noqa: PLC0415

    return Console(quiet=True)
