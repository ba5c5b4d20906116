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
from datetime import timedelta
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
from flows.errors import SparkgateError
from flows.gates.base import GateContext, GateResult, Outcome
from flows.pipeline.promote import decide_promotion
from flows.pipeline.schedule import cluster_slot
from flows.pipeline.stages import GATES, QUALIFIED, digest_of, gate_cache_key, verdict
from flows.record import latest_record, open_record, record_hashes, write_index
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


def _gate_key(_context: object, parameters: dict[str, Any]) -> str:
    return str(parameters["key"])


@task(name="gate", cache_key_fn=_gate_key, persist_result=True, cache_expiration=timedelta(days=30))
def gate_task(
    gate: str, key: str, run: Callable[[], GateResult], save: Callable[[GateResult], None]
) -> GateResult | State[GateResult]:
    """Run one gate, write its result into the record at once; a failed gate is not cached.

    A failed gate ends its task Failed by returning the state (a verdict, not a crash: no
    traceback in the log), with the result as the state's data.
    """
    del key  # part of the cache key only
    result = run()
    save(result)
    if result.outcome == Outcome.FAILED:
        return Failed(message=f"{gate}: {result.reason}", data=result)
    return result


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
            results = _run_gates(context, record, build.digest, fresh=fresh, view=view)
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


def _run_gates(
    context: GateContext, record: Any, build_digest: str, *, fresh: bool, view: StageBoard
) -> dict[str, GateResult]:
    results: dict[str, GateResult] = {}
    for gate in GATES:
        settings = getattr(context.release.gates, gate)
        view.start(gate)
        if not settings.enabled:
            result = _skipped(gate, "disabled in the release file")
            record.save_stage(result)
            results[gate] = result
            view.finish(gate, "skipped", result.reason)
            continue
        key = gate_cache_key(
            gate, build_digest=build_digest, cluster=context.cluster, settings=settings,
            record=str(record.path),
            extra={
                "release": digest_of(context.release.engine),
                "model": digest_of(context.release.model),
                "previous": digest_of(context.previous) if context.previous else None,
            },
        )  # fmt: skip
        run = _gate_runner(gate, context, record, results)
        state = gate_task.with_options(name=gate, refresh_cache=fresh)(
            gate, key, run, record.save_stage, return_state=True
        )
        if state.is_failed():
            saved = record.load_stage(gate)
            if saved is None:  # the gate crashed before it produced a verdict
                saved = _skipped(gate, _state_message(state), outcome=Outcome.FAILED)
                record.save_stage(saved)
            results[gate] = saved
            view.finish(gate, "failed", saved.reason)
            break
        finished = state.result()
        if not isinstance(finished, GateResult):
            raise SparkgateError(f"{gate}: the gate task returned {type(finished).__name__}")
        if record.load_stage(gate) is None:  # cached result from an earlier run of this record
            record.save_stage(finished)
        results[gate] = finished
        cached = state.name == "Cached"
        status = (
            "cached" if cached else ("skipped" if finished.outcome == Outcome.SKIPPED else "passed")
        )
        view.finish(gate, status, finished.reason)
    return results


def _gate_runner(
    gate: str, context: GateContext, record: Any, results: dict[str, GateResult]
) -> Callable[[], GateResult]:
    """The call that runs one gate with what it needs from earlier gates and records."""
    out_dir = record.stage_dir(gate)
    settings = getattr(context.release.gates, gate)
    if gate == "release_tests":
        from flows.gates.release_tests import run_release_tests  # noqa: PLC0415

        return lambda: run_release_tests(context, settings, out_dir)
    if gate == "determinism":
        from flows.gates.determinism import run_determinism  # noqa: PLC0415

        previous_hashes = _previous_hashes(context)
        return lambda: run_determinism(context, settings, out_dir, previous_hashes=previous_hashes)
    if gate == "cold_boots":
        from flows.gates.cold_boots import run_cold_boots  # noqa: PLC0415

        determinism = results.get("determinism")
        reference = determinism.summary.get("hashes") if determinism else None
        return lambda: run_cold_boots(context, settings, out_dir, reference=reference)
    from flows.gates.benchmark import run_benchmark  # noqa: PLC0415
    from flows.pipeline.calibrate import ledger_for  # noqa: PLC0415

    return lambda: run_benchmark(context, settings, out_dir, ledger=ledger_for(context, settings))


def _previous_hashes(context: GateContext) -> dict[str, Any] | None:
    if context.previous is None:
        return None
    found = latest_record(context.experiments, context.previous.name)
    return record_hashes(found) if found is not None else None


def _skipped(gate: str, reason: str, outcome: Outcome = Outcome.SKIPPED) -> GateResult:
    from datetime import UTC, datetime  # noqa: PLC0415

    return GateResult(
        gate=gate, outcome=outcome, reason=reason, started_at=datetime.now(UTC), seconds=0.0
    )


def _state_message(state: Any) -> str:
    try:
        state.result()
    except SparkgateError as error:
        return str(error)
    except Exception as error:  # noqa: BLE001 - any crash of a gate is reported, not re-raised
        return f"{type(error).__name__}: {error}"
    return str(state.message or "failed")


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
