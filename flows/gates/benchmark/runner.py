"""The benchmark gate's I/O: interleaved arms against the previous release, then the decision.

One arm is one fresh boot of one release with the release's suite run on it, because boot-to-boot
noise is only visible across boots. Arms run in session order (default candidate, previous,
candidate, so linear drift cancels), each arm's raw receipts are written under
`arms/<i>-<role>/` the moment it ends, and the arm-level statistics of `flows.bench.compare`
decide every point: faster or level passes, slower (surely slower, and by more than the tolerance
as estimated) fails, inconclusive adds the next interleaved arm (previous, candidate, ...) up to
`max_arms` and then fails as inconclusive. A noisy session can delay a release, never wave a
slower one through. The session logic itself is pure and lives in `rules`; this module supplies
boots and the workload runner.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from flows.bench.compare import Comparison, SessionDecision, compare_arms
from flows.bench.ledger import Ledger, write_ledger
from flows.bench.present import plot_changes, recipe_text
from flows.bench.report import ArmReport, read_arm, write_arm
from flows.bench.runner import run_arm, suite_digest
from flows.cluster.boot.session import load_session, start_release, stop_session
from flows.engine_api.endpoint import Endpoint
from flows.engine_api.metrics import OPTIONAL_METRICS, scrape_names
from flows.errors import BenchError, BootError, SparkgateError
from flows.gates.base import (
    GateContext,
    GateResult,
    GateVerdict,
    History,
    Outcome,
    RecordedArms,
    api_base_url,
)
from flows.gates.benchmark.cross_rules import CrossSession
from flows.gates.benchmark.cross_session import cross_looks, run_cross_session
from flows.gates.benchmark.hygiene import ArmHygiene, measure_until_clean
from flows.gates.benchmark.plan import plan_steps
from flows.gates.benchmark.resolution import cluster_resolution, resolution_lines
from flows.gates.benchmark.rules import (
    LEDGER_FILE,
    NAME,
    Focus,
    Role,
    Session,
    arm_folder,
    kv_capacity_by_role,
    order_problem,
    points_summary,
    reason_for,
    run_session,
    session_looks,
    session_outcome,
)
from flows.gates.benchmark.story import BENCHMARK_STORY, BenchmarkStory, bench_headline
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.gates.files import GateFiles
from flows.gates.harness import failed, run_gate
from flows.gates.plan import PlanContext, PlanStep
from flows.spec.cluster import Cluster
from flows.spec.release import BenchmarkGate, Release
from flows.spec.suite import Suite
from flows.spec.suites import load_suites


def endpoint_of(cluster: Cluster) -> Endpoint:
    """The head's API with the metric names of the cluster's engine profile: the prefix-cache
    counters as optional names (read where exported: a session point's cached share is checked
    against them, vLLM's under vLLM's names), every other named metric required."""
    metrics = cluster.engine.metrics
    named = metrics.model_dump(exclude={"path", "compiles"})
    optional = {key: named.pop(key, None) for key in OPTIONAL_METRICS}
    return Endpoint(
        api_base_url(cluster),
        metric_names=scrape_names(named),
        metrics_path=metrics.path,
        optional_names=scrape_names(optional),
    )


def _stop_running(context: GateContext) -> None:
    """Every arm is a fresh boot: stop whatever this project left running on the cluster."""
    running = load_session(context.state, context.cluster.name)
    if running is not None:
        context.say(f"stopping {running.release} on {context.cluster.name} before the arm")
        stop_session(context.cluster, running, context.transports, context.state)


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


def focused(suite: Suite, focus: Focus) -> Suite:
    """The suite cut to the workloads of the points in `focus` (all of it for None)."""
    if focus is None:
        return suite
    names = {point.partition("/")[0] for point in focus}
    return suite.model_copy(update={"workloads": [w for w in suite.workloads if w.name in names]})


def measure_arm(  # noqa: PLR0917 - one arm of one session: all of these name it
    context: GateContext,
    suite: Suite,
    out_dir: Path,
    index: int,
    role: Role,
    focus: Focus = None,
    hygiene: ArmHygiene | None = None,
) -> ArmReport:
    """Boot the arm's release fresh, run the suite (or its `focus`) on it, write arm.json; with
    `hygiene`, on cooled-down nodes, sampled while the suite runs (probes.json beside it)."""
    suite = focused(suite, focus)
    release: Release | None = context.release if role == "candidate" else context.previous
    if release is None:
        raise BenchError("a previous arm needs a previous release")
    say = context.say
    finished = finished_arm(arm_folder(out_dir, index, role), release.name, role, suite)
    if finished is not None:
        say(f"arm {index} ({role}, {release.name}): measured by the interrupted run, kept")
        return finished
    _stop_running(context)
    if context.host is not None:  # a host change: on for the candidate, off for the previous
        context.host.for_role(role, index)
    if hygiene is not None:
        hygiene.cool_down()
    say(f"arm {index} ({role}, {release.name}): booting")
    started = start_release(context.cluster, release, context.transports, context.state, say=say)
    try:
        say(f"arm {index} ({role}, {release.name}): ready in {started.wall_s:.1f}s, measuring")
        with hygiene.watch() if hygiene is not None else nullcontext():
            report = run_arm(
                endpoint_of(context.cluster), suite, label=f"{index}-{role}", say=say,
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
                **({"host_layers": _layers_state(role)} if context.host is not None else {}),
            }
        }
    )
    write_arm(report, arm_folder(out_dir, index, role))
    if hygiene is not None:
        hygiene.keep(arm_folder(out_dir, index, role))
    return report


@dataclass(frozen=True)
class BenchmarkInputs:
    """What the benchmark takes from earlier records: the A/A ledger, and for an irreversible
    host change the previous release's recorded arms (None: not one, or none found)."""

    ledger: Ledger | None
    recorded: RecordedArms | None = None

    @staticmethod
    def of(given: BenchmarkInputs | Ledger | None) -> tuple[Ledger | None, RecordedArms | None]:
        """The ledger and recorded arms of the inputs (a ledger alone: scripts and tests)."""
        if isinstance(given, BenchmarkInputs):
            return given.ledger, given.recorded
        return given, None


def irreversible(release: Release) -> bool:
    """Whether the release changes the hosts in a way no previous arm can be run on."""
    return any(not layer.reversible for layer in release.host)


def _keep_ledger(files: GateFiles, ledger: Ledger | None) -> None:
    """Keep the A/A ledger the session draws on: verify recomputes from the very ledger."""
    if ledger is not None and ledger.sessions:
        files.write_text(LEDGER_FILE, ledger.model_dump_json(indent=1) + "\n")


def _measured(  # noqa: PLR0917 - the session and everything it is run with
    settings: BenchmarkGate,
    recorded: RecordedArms | None,
    files: GateFiles,
    ledger: Ledger | None,
    measure: Callable[[int, Role, Focus], ArmReport],
    compare: Callable[[list[ArmReport], list[ArmReport]], Comparison],
    may_add: Callable[[], bool],
    on_compare: Callable[[Comparison, SessionDecision, int], None],
) -> tuple[Session, CrossSession | None]:
    """The session in this release's order (C, P, C, ...), or, when the hosts cannot go back,
    the candidate's arms compared across sessions with the recorded ones."""
    if recorded is not None:
        return run_cross_session(
            settings, recorded, files, ledger=ledger,
            measure=lambda index, focus: measure(index, "candidate", focus),
            may_add=may_add, on_compare=on_compare,
        )  # fmt: skip
    session = run_session(
        settings.arms, settings.max_arms, measure, compare, may_add=may_add, on_compare=on_compare
    )
    return session, None


def _summary(
    session: Session,
    settings: BenchmarkGate,
    looks: int,
    hygiene: ArmHygiene,
    cross: CrossSession | None,
) -> BenchmarkSummary:
    """The gate's summary of a finished session (across sessions: today's arms only, the
    recorded ones named by `cross_session`)."""
    candidates = len(session.of("candidate"))
    return BenchmarkSummary(
        arms=list(session.roles) if cross is None else ["candidate"] * candidates,
        tolerance=settings.tolerance,
        decision=session.decision.value,
        ledger_gaps=session.comparison.ledger_gaps,
        looks=looks if cross is None else cross_looks(settings),
        slower_rule=session.comparison.slower_rule,
        gate_metrics=settings.gate_metrics,
        tolerances=settings.tolerances,
        points=points_summary(session),
        kv_capacity_tokens=kv_capacity_by_role(session),
        disturbed=hygiene.disturbed,
        cross_session=cross,
    )


def _refusal(
    context: GateContext, settings: BenchmarkGate, recorded: RecordedArms | None
) -> str | None:
    """Why the session cannot start: arms out of order, or an irreversible host change with no
    recorded arms of the previous release to compare with."""
    previous = context.previous.name if context.previous else "the previous release"
    if irreversible(context.release) and recorded is None:
        return (
            f"{context.release.name} changes the hosts irreversibly, so its arms are compared "
            f"with {previous}'s arms of its newest published record on {context.cluster.shape}, "
            f"and there is none with benchmark arms: qualify {previous} on this shape before "
            "the change"
        )
    return order_problem(settings.arms)


def _layers_state(role: Role) -> str:
    """How the release's host layers stood while an arm of `role` ran."""
    return "applied" if role == "candidate" else "reverted"


@dataclass(frozen=True)
class BenchmarkRunner:
    """The benchmark gate as the registry lists it."""

    name: str = NAME
    title: str = "benchmark"
    settings_model: type[BenchmarkGate] = BenchmarkGate
    summary_model: type[BenchmarkSummary] = BenchmarkSummary
    boot_failure: str = "an arm failed to boot"
    story: BenchmarkStory = BENCHMARK_STORY

    def inputs(
        self, context: GateContext, earlier: Mapping[str, GateResult], history: History
    ) -> BenchmarkInputs:
        """The A/A ledger of earlier records of this cluster shape and suite; for an
        irreversible host change, the previous release's recorded arms too."""
        del earlier
        ledger = history.ledger(context, context.release.gates.benchmark)
        recorded = history.previous_arms(context) if irreversible(context.release) else None
        return BenchmarkInputs(ledger, recorded)

    def plan(self, given: PlanContext) -> list[PlanStep]:
        """What the gate would do on which node (`sparkgate qualify --plan`)."""
        return plan_steps(given)

    def run(
        self,
        context: GateContext,
        settings: BenchmarkGate,
        given: BenchmarkInputs | Ledger | None,
        files: GateFiles,
    ) -> GateVerdict:
        """Arms candidate/previous in session order, then the non-inferiority decision per point."""
        began = time.monotonic()
        out_dir = files.root
        inputs, recorded = BenchmarkInputs.of(given)
        if context.previous is None:
            return GateVerdict(
                outcome=Outcome.SKIPPED, reason="no previous release to compare with"
            )
        if (problem := _refusal(context, settings, recorded)) is not None:
            return failed(problem)
        suite = load_suites(settings.suites())
        tolerance_pct = settings.tolerance * 100
        resolution = cluster_resolution(settings, suite, inputs)
        for line in resolution_lines(resolution, context.cluster.shape, suite.name):
            context.say(line)
        looks = session_looks(len(settings.arms), settings.max_arms)

        def compare(new: list[ArmReport], old: list[ArmReport]) -> Comparison:
            return compare_arms(
                new,
                old,
                ledger=inputs,
                tolerance_pct=tolerance_pct,
                policy=settings.policy(),
                looks=looks,
            )

        def on_compare(comparison: Comparison, decision: SessionDecision, arms: int) -> None:
            files.write_text("compare.json", comparison.model_dump_json(indent=1) + "\n")
            files.write_text("bench.txt", recipe_text(comparison) + "\n")
            context.say(f"after {arms} arms: {decision.value}")

        _keep_ledger(files, inputs)
        hygiene = ArmHygiene(context.cluster, context.transports, context.say)

        def in_time() -> bool:
            return time.monotonic() - began < settings.timeout_s

        def measure(index: int, role: Role, focus: Focus) -> ArmReport:
            return measure_until_clean(
                lambda: measure_arm(context, suite, out_dir, index, role, focus, hygiene=hygiene),
                hygiene, out_dir, index, role, in_time,
            )  # fmt: skip

        try:
            session, cross = _measured(
                settings, recorded, files, inputs, measure, compare, in_time, on_compare
            )
        except BootError:
            raise  # the harness reports it with its evidence
        except SparkgateError as error:
            return failed(f"the benchmark could not be completed: {error}")
        if session.comparison.points:
            plot_changes(session.comparison, out_dir / "changes.png")
        candidates = session.of("candidate")
        if len(candidates) >= 2:  # C1 and C2 are an A/A pair: the ledger can grow from this run
            write_ledger(
                Ledger().with_session(candidates[0], candidates[1]), out_dir / "aa-gaps.json"
            )
        passed = session.decision is SessionDecision.PASS
        summary = _summary(session, settings, looks, hygiene, cross)
        # a pass says what the board, records and artifact say (the one headline); a failure
        # says why, naming the rows that decided
        return GateVerdict(
            outcome=session_outcome(session.decision),
            reason=(
                bench_headline(summary)
                if passed
                else reason_for(session, tolerance_pct, settings.max_arms)
            ),
            summary=summary,
        )


BENCHMARK = BenchmarkRunner()


def run_benchmark(
    context: GateContext,
    settings: BenchmarkGate,
    out_dir: Path,
    *,
    ledger: Ledger | None = None,
    recorded: RecordedArms | None = None,
) -> GateResult:
    """The gate through the harness, on its own (tests and scripts)."""
    return run_gate(BENCHMARK, context, settings, BenchmarkInputs(ledger, recorded), out_dir)
