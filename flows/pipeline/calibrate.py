"""A/A calibration, and the A/A ledger the benchmark gate derives from records.

Boot-to-boot noise is only visible across boots, so the benchmark gate needs past gaps between
two arms of the same release. They come from records, never from a side file: every
qualification's benchmark stage keeps the gap of its own C1 and C2 (`benchmark/aa-gaps.json`),
and `sparkgate calibrate` runs one release in every arm and keeps n-1 gaps of n arms in a
calibration record (experiments/calibration/<date>-<release>, apart from qualification records
so a calibration is never a release's "latest record"). `ledger_from_records` pools the gaps of
published records of the same cluster shape and suite, so the ledger grows with every run and
every number in it can be traced to a record; a gap file edited since it was saved is left out.

The n-1 gaps of n same-release arms are Helmert contrasts of the arms' log means, scaled so each
has the variance of one log(C1/C2) gap (2 sigma^2) and all are independent: the first is exactly
log(C1/C2), the k-th compares arm k+1 with the mean of the arms before it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, ConfigDict

from flows.bench.ledger import Ledger, key, write_ledger
from flows.bench.report import ArmReport
from flows.errors import BenchError, BootError, SparkgateError
from flows.gates.base import GateContext, GateResult, Outcome
from flows.gates.benchmark.summary import CalibrationSummary
from flows.record.atomic import sha256_file
from flows.record.model import Record
from flows.record.reader import list_records
from flows.spec.release import BenchmarkGate
from flows.spec.suite import Suite

STAGE = "calibration"
CALIBRATION_DIR = "calibration"
GAPS_FILE = "aa-gaps.json"
VERDICT = "passed"  # what `verify` expects of a record whose every stage passed
# Stages whose folders hold A/A gaps: a qualification's benchmark and a calibration.
GAP_STAGES = ("benchmark", STAGE)


def helmert_gaps(reports: Sequence[ArmReport], label: str) -> Ledger:
    """n-1 independent A/A gaps from n arms of one release, per point and gated metric."""
    gaps: dict[str, list[float]] = {}
    for name, point in reports[0].points.items():
        for metric in point.gate:
            means = _arm_means(reports, name, metric)
            if means is None:
                continue
            logs = np.log(means)
            for k in range(1, len(logs)):
                contrast = float(np.mean(logs[:k]) - logs[k])
                gaps.setdefault(key(name, metric), []).append(math.sqrt(2 * k / (k + 1)) * contrast)
    sessions = [
        f"{label}: arm {k + 1} vs arms 1-{k}" if k > 1 else f"{label}: arm 2 vs arm 1"
        for k in range(1, len(reports))
    ]
    return Ledger(gaps=gaps, sessions=sessions)


def _arm_means(reports: Sequence[ArmReport], point: str, metric: str) -> list[float] | None:
    """Each arm's mean of one point's metric; None unless every arm has positive values."""
    means: list[float] = []
    for report in reports:
        found = report.points.get(point)
        values = found.values(metric) if found is not None else []
        if not values or min(values) <= 0:
            return None
        means.append(float(np.mean(values)))
    return means


def merge(ledgers: Sequence[Ledger]) -> Ledger:
    """One ledger holding every gap and session of the given ones, in order."""
    gaps: dict[str, list[float]] = {}
    sessions: list[str] = []
    for ledger in ledgers:
        for name, values in ledger.gaps.items():
            gaps.setdefault(name, []).extend(values)
        sessions.extend(ledger.sessions)
    return Ledger(gaps=gaps, sessions=sessions)


def ledger_from_records(
    experiments: Path, shape: str, suite: str, *, published_before: datetime | None = None
) -> Ledger:
    """The A/A ledger of every published record of this cluster shape and suite, oldest first.

    Qualification records (experiments/*) and calibration records (experiments/calibration/*)
    both count; a record's gaps are used only while its gap and arm files are as saved.
    `published_before` gives the ledger as it was at a moment (a stage's start), for verify.
    """
    records = [*list_records(experiments), *list_records(experiments / CALIBRATION_DIR)]
    records.sort(key=lambda record: (record.created_at, record.name))
    found: list[Ledger] = []
    for record in records:
        if record.status != "published" or record.cluster.get("shape") != shape:
            continue
        if published_before and (record.published_at or published_before) >= published_before:
            continue
        for stage in GAP_STAGES:
            ledger = _record_gaps(record, stage, suite)
            if ledger is not None:
                found.append(ledger)
    return merge(found)


def _record_gaps(record: Record, stage: str, suite: str) -> Ledger | None:
    """One stage's gaps, labelled with the record, if they were measured with this suite."""
    entry = record.stages.get(stage)
    if entry is None or record.folder is None:
        return None
    listed = {f.path: f.sha256 for f in entry.files}
    gaps_path = f"{stage}/{GAPS_FILE}"
    arms = sorted(path for path in listed if path.endswith("/arm.json"))
    if gaps_path not in listed or not arms:
        return None
    arm = _unchanged_json(record.folder, arms[0], listed[arms[0]])
    gaps = _unchanged_json(record.folder, gaps_path, listed[gaps_path])
    if not isinstance(arm, dict) or arm.get("suite") != suite or not isinstance(gaps, dict):
        return None
    try:
        ledger = Ledger.model_validate(gaps)
    except ValueError:
        return None
    labelled = [f"{record.name}: {session}" for session in ledger.sessions]
    return ledger.model_copy(update={"sessions": labelled})


def _unchanged_json(folder: Path, relative: str, sha256: str) -> Any:
    """A record file as JSON, or None when it is missing, edited since saved, or not JSON."""
    file = folder / relative
    if not file.is_file() or sha256_file(file) != sha256:
        return None
    try:
        return json.loads(file.read_text())
    except ValueError:
        return None


def suite_of(settings: BenchmarkGate) -> Suite:
    """The suite a benchmark setting names (a name in config/suites or a file)."""
    from flows.gates.benchmark.runner import suite_file  # noqa: PLC0415
    from flows.spec.load import load_model  # noqa: PLC0415

    return load_model(suite_file(settings.suite), Suite)


def ledger_for(context: GateContext, settings: BenchmarkGate) -> Ledger:
    """The ledger a qualification's benchmark uses: records of its cluster shape and suite."""
    return ledger_from_records(context.experiments, context.cluster.shape, suite_of(settings).name)


# -- the calibration run -------------------------------------------------------------------------


def run_calibration(
    context: GateContext,
    suite: Suite,
    arms: int,
    out_dir: Path,
    measure: Callable[[int], ArmReport] | None = None,
) -> GateResult:
    """Measure `arms` fresh boots of the release and keep their n-1 A/A gaps in aa-gaps.json."""
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
    reason = (
        f"{len(ledger.sessions)} A/A gaps from {arms} arms of {context.release.name} "
        f"({suite.name}); boot noise sd up to {noise[worst]:.2f}% ({worst})"
    )
    summary = CalibrationSummary(arms=arms, suite=suite.name, shape=context.cluster.shape,
                                 gaps=len(ledger.sessions), boot_noise_pct=noise)  # fmt: skip
    return _result(started, began, Outcome.PASSED, reason, summary=summary, files=_files(out_dir))


def _gaps(result: GateResult) -> int:
    summary = result.summary_as(CalibrationSummary)
    return summary.gaps if summary is not None else 0


def boot_noise(ledger: Ledger) -> dict[str, float]:
    """Arm-to-arm SD (%) per point:metric implied by the gaps (each gap has variance 2 sd^2)."""
    return {
        name: round(100 * math.sqrt(float(np.mean(np.square(values))) / 2), 3)
        for name, values in ledger.gaps.items()
        if values
    }


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
def calibration_task(context: GateContext, suite: Suite, arms: int, out_dir: Path) -> GateResult:
    """Run the calibration arms (a thin task over `run_calibration`)."""
    return run_calibration(context, suite, arms, out_dir)


@flow(name="calibrate-release", validate_parameters=False)
def calibrate_flow(release_file: str, cluster_file: str, arms: int = 3) -> CalibrationOutcome:
    """Run one release in every arm on the cluster and publish a calibration record."""
    from prefect import get_run_logger  # noqa: PLC0415

    from flows.cluster.ops.lock import ClusterLock, lock_settings  # noqa: PLC0415
    from flows.cluster.transport.factory import TransportPool  # noqa: PLC0415
    from flows.pipeline.qualify import (  # noqa: PLC0415
        _versions,
        build_task,
        distribute_task,
        preflight_task,
    )
    from flows.pipeline.schedule import cluster_slot  # noqa: PLC0415
    from flows.record import open_record  # noqa: PLC0415
    from flows.settings import project_root, state_dir  # noqa: PLC0415
    from flows.spec.cluster import Cluster  # noqa: PLC0415
    from flows.spec.load import load_model  # noqa: PLC0415
    from flows.spec.release import load_release  # noqa: PLC0415

    if arms < 2:
        raise BenchError(f"--arms {arms}: a calibration needs at least 2 arms")
    release = load_release(release_file)
    cluster = load_model(cluster_file, Cluster)
    suite = suite_of(release.gates.benchmark)
    logger = get_run_logger()
    say: Callable[[str], None] = logger.info
    experiments = project_root() / "experiments"
    state = state_dir()
    with TransportPool(cluster) as pool:
        transports = {node.name: pool.node(node.name) for node in cluster.nodes}
        command = f"sparkgate calibrate {release_file}"
        with (
            cluster_slot(cluster.name),
            ClusterLock(pool.head, lock_settings(cluster), command=command),
        ):
            say(preflight_task(cluster, pool))
            build = build_task(release, state, say)
            for line in distribute_task(
                build, release, cluster, transports=transports, state=state, say=say
            ):
                say(line)
            context = GateContext(
                cluster=cluster, release=release, previous=None, transports=transports,
                state=state, experiments=experiments, progress=say,
            )  # fmt: skip
            record = open_record(
                experiments / CALIBRATION_DIR, release, build_digest=build.digest,
                cluster=cluster, previous=None, resume=False,
            )  # fmt: skip
            record.save_json("build.json", build.model_dump(mode="json"))
            result = calibration_task(context, suite, arms, record.stage_dir(STAGE))
            record.save_stage(result)
    verdict = VERDICT if result.outcome == Outcome.PASSED else "failed"
    published = record.publish(verdict=verdict, stage_order=[STAGE], versions=_versions())
    ledger = ledger_from_records(experiments, cluster.shape, suite.name)
    outcome = CalibrationOutcome(
        release=release.name, verdict=verdict, reason=result.reason, record=str(published),
        gaps_added=_gaps(result), ledger_sessions=len(ledger.sessions),
    )  # fmt: skip
    if result.outcome != Outcome.PASSED:
        raise BenchError(f"{release.name}: calibration failed: {result.reason} ({published})")
    return outcome
