"""A/A calibration: one release booted fresh in every arm, its n-1 gaps kept in a record.

The benchmark gate can bound boot-to-boot noise only with past A/A gaps (flows.record.aa_ledger
reads them from records); `sparkgate calibrate` measures them on purpose and publishes them as a
calibration record (experiments/calibration/<date>-<release>), which every later qualification
of the same cluster shape and suite pools. The gaps are Helmert contrasts of the arms' log means
(`flows.bench.ledger.helmert_gaps`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, ConfigDict

from flows.bench.ledger import boot_noise, helmert_gaps, write_ledger
from flows.bench.report import ArmReport
from flows.cluster.ops.host_layers import host_layers_on
from flows.cluster.probes.layers import with_layers_on
from flows.cluster.runtime.factory import check_fits
from flows.errors import BenchError, BootError, SparkgateError
from flows.gates.base import GateContext, GateResult, Outcome
from flows.gates.benchmark.summary import CalibrationSummary
from flows.pipeline.events import observer_of_run
from flows.pipeline.prelude import prepared_cluster, versions
from flows.pipeline.previous import as_qualified
from flows.pipeline.quiet_logs import quiet_failed_states
from flows.pipeline.run_label import label_current_run, run_tags, run_title
from flows.record.aa_ledger import (
    CALIBRATION_DIR,
    CALIBRATION_STAGE,
    GAPS_FILE,
    ledger_from_records,
    suite_of,
)
from flows.settings import project_root
from flows.spec.cluster import Cluster
from flows.spec.host import check_layers
from flows.spec.load import load_model
from flows.spec.release import load_release
from flows.spec.suite import Suite

STAGE = CALIBRATION_STAGE
VERDICT = "passed"  # what `verify` expects of a record whose every stage passed


# -- the calibration run -------------------------------------------------------------------------


def run_calibration(
    context: GateContext,
    suite: Suite,
    arms: int,
    out_dir: Path,
    measure: Callable[[int], ArmReport] | None = None,
    *,
    gated_only: str | None = None,
) -> GateResult:
    """Measure `arms` fresh boots of the release and keep their n-1 A/A gaps in aa-gaps.json;
    `gated_only` says how the suite was narrowed to the workloads that gate, if it was."""
    from flows.gates.benchmark.runner import measure_arm  # noqa: PLC0415

    started, began = datetime.now(UTC), time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    one = measure or (lambda index: measure_arm(context, suite, out_dir, index, "candidate"))
    reports: list[ArmReport] = []
    try:
        for index in range(1, arms + 1):
            reports.append(one(index))
    except BootError as error:
        evidence = [str(error.evidence)] if error.evidence else []
        return _result(started, began, Outcome.FAILED, f"arm {len(reports) + 1} failed to boot: "
                       f"{error}", evidence=evidence, files=_files(out_dir))  # fmt: skip
    except SparkgateError as error:
        reason = f"arm {len(reports) + 1} could not be measured: {error}"
        return _result(started, began, Outcome.FAILED, reason, files=_files(out_dir))
    ledger = helmert_gaps(reports, f"calibrate {context.release.name}")
    if not ledger.gaps:
        reason = "no point was measured in every arm: no gaps to keep"
        return _result(started, began, Outcome.FAILED, reason, files=_files(out_dir))
    write_ledger(ledger, out_dir / GAPS_FILE)
    noise = boot_noise(ledger)
    worst = max(noise, key=lambda name: noise[name])
    measured = suite.name if gated_only is None else f"{suite.name}, {gated_only}"
    reason = (
        f"{len(ledger.sessions)} A/A gaps from {arms} arms of {context.release.name} "
        f"({measured}); boot noise sd up to {noise[worst]:.2f}% ({worst})"
    )
    summary = CalibrationSummary(arms=arms, suite=suite.name, shape=context.cluster.shape,
                                 gaps=len(ledger.sessions), boot_noise_pct=noise)  # fmt: skip
    return _result(started, began, Outcome.PASSED, reason, summary=summary, files=_files(out_dir))


def _gaps(result: GateResult) -> int:
    summary = result.summary_as(CalibrationSummary)
    return summary.gaps if summary is not None else 0


def _result(
    started: datetime, began: float, outcome: Outcome, reason: str, **fields: object
) -> GateResult:
    return GateResult.model_validate({
        "gate": STAGE, "outcome": outcome, "reason": reason, "started_at": started,
        "seconds": round(time.monotonic() - began, 3), **fields,
    })  # fmt: skip


def _files(out_dir: Path) -> list[str]:
    return sorted(
        p.relative_to(out_dir).as_posix()
        for p in out_dir.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )


# -- the Prefect flow ----------------------------------------------------------------------------


class CalibrationOutcome(BaseModel):
    """What a calibration ended with: the verdict, its record, and the ledger it now feeds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    release: str
    verdict: str
    reason: str
    record: str
    gaps_added: int
    ledger_sessions: int


@task(name="calibration", cache_policy=NO_CACHE)  # fresh boots every time: never cached
def calibration_task(
    context: GateContext, suite: Suite, arms: int, out_dir: Path, gated_only: str | None
) -> GateResult:
    """Run the calibration arms (a thin task over `run_calibration`)."""
    return run_calibration(context, suite, arms, out_dir, gated_only=gated_only)


def narrowed(suite: Suite) -> tuple[Suite, str]:
    """The suite's gating workloads, and the words a record says it with."""
    kept = suite.gated_only()
    left_out = [w.name for w in suite.workloads if w not in kept.workloads]
    said = "gated workloads only" + (f", without {', '.join(left_out)}" if left_out else "")
    return kept, said


@flow(name="calibrate-release", validate_parameters=False)
def calibrate_flow(
    release_file: str, cluster_file: str, arms: int = 3, gated_only: bool = False
) -> CalibrationOutcome:
    """Run one release in every arm on the cluster and publish a calibration record; with
    `gated_only`, only the suite's gating workloads are measured (shorter arms; the reported
    points then draw on each session's own gap until qualifications add theirs)."""
    if arms < 2:
        raise BenchError(f"--arms {arms}: a calibration needs at least 2 arms")
    release = load_release(release_file)
    cluster = load_model(cluster_file, Cluster)
    check_fits(cluster, release, release_file, cluster_file)
    check_layers(release_file, release.host, {fact.name for fact in cluster.probes.facts})
    cluster = with_layers_on(cluster, [layer for layer in release.host if not layer.reversible])
    quiet_failed_states()
    label_current_run(run_title("calibrate", release, cluster), run_tags(release, None, cluster))
    suite, narrowing = suite_of(release.gates.benchmark), None
    if gated_only:
        suite, narrowing = narrowed(suite)
    experiments = project_root() / "experiments"
    observer = observer_of_run()
    pinned = as_qualified(experiments, release, cluster)
    if pinned is not None:  # measure the image that was qualified, never a new build of it
        observer.note(f"calibrating the image {release.name} qualified with: {pinned.build.image}")
        release = pinned
    with prepared_cluster(
        release, cluster, previous=None, command=f"sparkgate calibrate {release_file}",
        observer=observer, records=experiments / CALIBRATION_DIR, resume=False,
    ) as prepared:  # fmt: skip
        record = prepared.record
        with host_layers_on(  # a host change's noise is measured on the changed hosts
            cluster, release.host, prepared.held.transports, say=observer.note,
            on_step=lambda host: record.save_json("host.json", host.model_dump(mode="json")),
        ):  # fmt: skip
            observer.started(STAGE)
            result = calibration_task(
                prepared.context, suite, arms, record.stage_dir(STAGE), narrowing
            )
        record.save_stage(result)
    verdict = VERDICT if result.outcome == Outcome.PASSED else "failed"
    observer.finished(STAGE, verdict, f"{arms} arms" if verdict == VERDICT else result.reason)
    observer.started("record")
    published = record.publish(verdict=verdict, stage_order=[STAGE], versions=versions())
    observer.finished("record", "passed", str(published))
    ledger = ledger_from_records(experiments, cluster.shape, suite.name)
    outcome = CalibrationOutcome(
        release=release.name, verdict=verdict, reason=result.reason, record=str(published),
        gaps_added=_gaps(result), ledger_sessions=len(ledger.sessions),
    )  # fmt: skip
    if result.outcome != Outcome.PASSED:
        raise BenchError(f"{release.name}: calibration failed: {result.reason} ({published})")
    return outcome
