"""The benchmark gate: interleaved arms against the previous release, a non-inferiority decision.

One arm is one fresh boot of one release with the release's suite run on it, because boot-to-boot
noise is only visible across boots. Arms run in session order (default candidate, previous,
candidate, so linear drift cancels), each arm's raw receipts are written under
`arms/<i>-<role>/` the moment it ends, and the arm-level statistics of `flows.bench.compare`
decide every point: faster or level passes, slower beyond the tolerance fails, inconclusive adds
the next interleaved arm (previous, candidate, ...) up to `max_arms` and then fails as
inconclusive. A noisy session can delay a release, never wave a slower one through.

The session loop (`run_session`) is pure: it takes a function that measures one arm, so the
arm-adding logic is tested on synthetic arms; `run_benchmark` supplies boots and the workload
runner.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import numpy as np

from flows.bench.compare import Comparison, SessionDecision, compare_arms, session_decision
from flows.bench.ledger import Ledger, write_ledger
from flows.bench.present import plot_changes, recipe_text
from flows.bench.report import ArmReport, read_arm, write_arm
from flows.bench.runner import run_arm, suite_digest
from flows.cluster.boot.session import load_session, start_release, stop_session
from flows.engine_api.endpoint import DEFAULT_METRICS, Endpoint
from flows.errors import BenchError, BootError, SparkgateError
from flows.gates.base import GateContext, GateResult, Outcome, api_base_url
from flows.settings import project_root
from flows.spec.load import load_model
from flows.spec.release import BenchmarkGate, Release
from flows.spec.suite import Suite

GATE = "benchmark"
Role = Literal["candidate", "previous"]
MeasureArm = Callable[[int, Role], ArmReport]
Compare = Callable[[list[ArmReport], list[ArmReport]], Comparison]
_REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Session:
    """A finished session: arms in the order run, the last comparison and the decision."""

    roles: list[Role]
    reports: list[ArmReport]
    comparison: Comparison
    decision: SessionDecision
    stopped_early: bool = False

    def of(self, role: Role) -> list[ArmReport]:
        """This role's arms, in session order."""
        return [r for r, kind in zip(self.reports, self.roles, strict=True) if kind == role]


def order_problem(roles: Sequence[Role]) -> str | None:
    """The comparison reads arms as C1, P1, C2, P2, ...: any other order is refused by name."""
    expected = ["candidate" if i % 2 == 0 else "previous" for i in range(len(roles))]
    if list(roles) != expected:
        return (
            f"arms {', '.join(roles)}: arms must alternate starting with the candidate "
            f"({', '.join(expected)}), the order the statistics assume"
        )
    return None


def run_session(
    first: Sequence[Role],
    max_arms: int,
    measure: MeasureArm,
    compare: Compare,
    *,
    may_add: Callable[[], bool] = lambda: True,
    on_compare: Callable[[Comparison, SessionDecision, int], None] = lambda _c, _d, _n: None,
) -> Session:
    """Run the first arms, then decide; while undecided add the next interleaved arm.

    `measure(index, role)` measures arm `index` (from 1); `may_add()` False (e.g. past the gate's
    time limit) stops adding, which leaves an undecided session failed as inconclusive.
    """
    roles: list[Role] = []
    reports: list[ArmReport] = []
    for planned in first:
        reports.append(measure(len(roles) + 1, planned))
        roles.append(planned)
    while True:
        new = [r for r, kind in zip(reports, roles, strict=True) if kind == "candidate"]
        old = [r for r, kind in zip(reports, roles, strict=True) if kind == "previous"]
        comparison = compare(new, old)
        decision = session_decision(comparison, len(roles), max_arms)
        on_compare(comparison, decision, len(roles))
        if decision not in (SessionDecision.ADD_PREVIOUS, SessionDecision.ADD_CANDIDATE):
            return Session(roles, reports, comparison, decision)
        if not may_add():
            return Session(roles, reports, comparison, SessionDecision.FAIL_INCONCLUSIVE, True)
        role: Role = "previous" if decision is SessionDecision.ADD_PREVIOUS else "candidate"
        reports.append(measure(len(roles) + 1, role))
        roles.append(role)


def _role_mean(reports: Sequence[ArmReport], point: str, metric: str) -> float | None:
    """Mean over this role's arms of each arm's mean (the level the table shows)."""
    means = [
        float(np.mean(values))
        for report in reports
        if point in report.points and (values := report.points[point].values(metric))
    ]
    return float(np.mean(means)) if means else None


def points_summary(session: Session) -> list[dict[str, object]]:
    """One row per point and gated metric, as the record renders it."""
    rows: list[dict[str, object]] = []
    candidates, previous = session.of("candidate"), session.of("previous")
    for row in session.comparison.points:
        estimate = row.arms
        rows.append(
            {
                "point": row.point,
                "unit": row.metric,
                "higher_is_better": row.higher_is_better,
                "previous": _role_mean(previous, row.point, row.metric),
                "candidate": _role_mean(candidates, row.point, row.metric),
                "change": estimate.change_pct if estimate else None,
                "low": estimate.low_pct if estimate else None,
                "high": estimate.high_pct if estimate else None,
                "verdict": row.verdict.value,
            }
        )
    return rows


def _interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "no interval"
    return f"[{low:+.1f}, {high:+.1f}]%"


def reason_for(session: Session, tolerance_pct: float, max_arms: int) -> str:
    """The one line a person reads first, naming the points that decided."""
    comparison, arms = session.comparison, len(session.roles)
    if session.decision is SessionDecision.PASS:
        faster = sum(p.verdict.value == "faster" for p in comparison.points)
        return (
            f"no point slower than {tolerance_pct:g}% over {arms} arms "
            f"({faster} faster, {len(comparison.points) - faster} level)"
        )
    if session.decision is SessionDecision.FAIL_LOST:
        lost = [
            *comparison.missing,
            *(f"{k} ({v} failed)" for k, v in comparison.failed_requests.items()),
        ]
        return f"the candidate lost measurements: {', '.join(lost)}"
    if session.decision is SessionDecision.FAIL_SLOWER:
        slower = [
            f"{p.point} {p.metric} {p.arms.change_pct:+.1f}% "
            + _interval(p.arms.low_pct, p.arms.high_pct)
            if p.arms
            else f"{p.point} {p.metric}"
            for p in comparison.regressions
        ]
        return f"slower beyond {tolerance_pct:g}%: {'; '.join(slower)}"
    undecided = ", ".join(f"{p.point} {p.metric}" for p in comparison.inconclusive[:6])
    limit = "the gate's time limit" if session.stopped_early else f"max_arms {max_arms}"
    return f"inconclusive after {arms} arms ({limit}): {undecided}"


def suite_file(name: str) -> Path:
    """A suite by file (`.yaml`) or by name in config/suites of the project (or this checkout)."""
    given = Path(name)
    if given.suffix in (".yaml", ".yml"):
        return given
    for root in (project_root(), _REPO):
        candidate = root / "config" / "suites" / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    return project_root() / "config" / "suites" / f"{name}.yaml"


def _endpoint(context: GateContext) -> Endpoint:
    """The head's API with the metric names of the cluster's engine profile."""
    metrics = context.cluster.engine.metrics
    wanted = metrics.model_dump(exclude={"path"})
    names = {k: wanted[k] for k in DEFAULT_METRICS if isinstance(wanted.get(k), str)}
    return Endpoint(api_base_url(context.cluster), metric_names=names, metrics_path=metrics.path)


def _stop_running(context: GateContext) -> None:
    """Every arm is a fresh boot: stop whatever this project left running on the cluster."""
    running = load_session(context.state, context.cluster.name)
    if running is not None:
        context.progress(f"stopping {running.release} on {context.cluster.name} before the arm")
        stop_session(context.cluster, running, context.transports, context.state)


def arm_folder(out_dir: Path, index: int, role: Role) -> Path:
    """Where one arm's raw receipts go."""
    return out_dir / "arms" / f"{index}-{role}"


def finished_arm(folder: Path, release: str, role: Role, suite: Suite) -> ArmReport | None:
    """The arm an interrupted run of this record already measured, when it measured this one.

    The record is reopened only for the same candidate build, so a finished arm of the same
    release, role and suite is the measurement this run would repeat: keeping it loses nothing
    and saves a boot and a suite. An arm that stopped early, or of another suite, is measured
    again.
    """
    try:
        report = read_arm(folder)
    except BenchError:
        return None
    same = (
        report.identity.get("release") == release
        and report.identity.get("role") == role
        and report.identity.get("suite_sha256") == suite_digest(suite)
    )
    return report if same and report.aborted is None and report.finished_utc else None


def measure_arm(
    context: GateContext, suite: Suite, out_dir: Path, index: int, role: Role
) -> ArmReport:
    """Boot the arm's release fresh, run the suite on it, stop it, write arm.json at once."""
    release: Release | None = context.release if role == "candidate" else context.previous
    if release is None:
        raise BenchError("a previous arm needs a previous release")
    say = context.progress
    finished = finished_arm(arm_folder(out_dir, index, role), release.name, role, suite)
    if finished is not None:
        say(f"arm {index} ({role}, {release.name}): measured by the interrupted run, kept")
        return finished
    _stop_running(context)
    say(f"arm {index} ({role}, {release.name}): booting")
    started = start_release(
        context.cluster, release, context.transports, context.state, progress=say
    )
    try:
        say(f"arm {index} ({role}, {release.name}): ready in {started.wall_s:.1f}s, measuring")
        report = run_arm(
            _endpoint(context), suite, label=f"{index}-{role}", log=say,
            on_sample=lambda done, total: context.advance(f"arm {index} samples", done, total),
        )  # fmt: skip
    finally:
        stop_session(context.cluster, started.session, context.transports, context.state)
    report = report.model_copy(
        update={
            "identity": {
                **report.identity,
                "release": release.name,
                "role": role,
                "build": started.session.build,
                "boot_wall_s": round(started.wall_s, 3),
            }
        }
    )
    write_arm(report, arm_folder(out_dir, index, role))
    return report


def _write_comparison(comparison: Comparison, out_dir: Path) -> None:
    """compare.json and the recipe-style text after every decision (the latest wins)."""
    for name, text in (
        ("compare.json", comparison.model_dump_json(indent=1) + "\n"),
        ("bench.txt", recipe_text(comparison) + "\n"),
    ):
        partial = out_dir / f".{name}.partial"
        partial.write_text(text)
        partial.replace(out_dir / name)


def _result(
    started: datetime, began: float, outcome: Outcome, reason: str, **fields: object
) -> GateResult:
    return GateResult.model_validate(
        {
            "gate": GATE,
            "outcome": outcome,
            "reason": reason,
            "started_at": started,
            "seconds": round(time.monotonic() - began, 3),
            **fields,
        }
    )


def _files(out_dir: Path) -> list[str]:
    return sorted(
        p.relative_to(out_dir).as_posix()
        for p in out_dir.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )


def run_benchmark(
    context: GateContext, settings: BenchmarkGate, out_dir: Path, *, ledger: Ledger | None = None
) -> GateResult:
    """Arms candidate/previous in session order, then the non-inferiority decision per point."""
    started, began = datetime.now(UTC), time.monotonic()
    if context.previous is None:
        return _result(started, began, Outcome.SKIPPED, "no previous release to compare with")
    if (problem := order_problem(settings.arms)) is not None:
        return _result(started, began, Outcome.FAILED, problem)
    out_dir.mkdir(parents=True, exist_ok=True)
    suite = load_model(suite_file(settings.suite), Suite)
    tolerance_pct = settings.tolerance * 100

    def compare(new: list[ArmReport], old: list[ArmReport]) -> Comparison:
        return compare_arms(new, old, ledger=ledger, tolerance_pct=tolerance_pct)

    def on_compare(comparison: Comparison, decision: SessionDecision, arms: int) -> None:
        _write_comparison(comparison, out_dir)
        context.progress(f"after {arms} arms: {decision.value}")

    try:
        session = run_session(
            settings.arms, settings.max_arms,
            lambda index, role: measure_arm(context, suite, out_dir, index, role),
            compare,
            may_add=lambda: time.monotonic() - began < settings.timeout_s,
            on_compare=on_compare,
        )  # fmt: skip
    except BootError as error:
        evidence = [str(error.evidence)] if error.evidence else []
        return _result(
            started, began, Outcome.FAILED, f"an arm failed to boot: {error}",
            evidence=evidence, files=_files(out_dir),
        )  # fmt: skip
    except SparkgateError as error:
        return _result(
            started, began, Outcome.FAILED, f"the benchmark could not be completed: {error}",
            files=_files(out_dir),
        )  # fmt: skip
    if session.comparison.points:
        plot_changes(session.comparison, out_dir / "changes.png")
    candidates = session.of("candidate")
    if len(candidates) >= 2:  # C1 and C2 are an A/A pair: the ledger can grow from this session
        write_ledger(Ledger().with_session(candidates[0], candidates[1]), out_dir / "aa-gaps.json")
    passed = session.decision is SessionDecision.PASS
    return _result(
        started, began, Outcome.PASSED if passed else Outcome.FAILED,
        reason_for(session, tolerance_pct, settings.max_arms),
        summary={
            "arms": list(session.roles),
            "tolerance": settings.tolerance,
            "decision": session.decision.value,
            "ledger_gaps": session.comparison.ledger_gaps,
            "points": points_summary(session),
        },
        files=_files(out_dir),
    )  # fmt: skip
