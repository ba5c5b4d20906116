"""The release qualification as a Prefect flow: lock, preflight, build once, gates, record.

Each stage is a thin Prefect task over a plain function. Gates run in order and stop at the first
failure (later gates are not blamed); each gate's result is written into the experiments record
the moment it finishes, and a gate that passed is cached by Prefect under a key covering the
build digest, the resolved cluster, its settings and the record, so running the same command
again after a failure or Ctrl-C resumes at the first gate without a result (`fresh=True` starts
over). The record is published (README verdict first) before the flow ends; the flow ends Failed
when any gate failed, and when the promotion was refused (rejected, no decision in time): a
verdict in one line, never a traceback. Import this module only after
`flows.settings.prefect_environment()`.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import replace
from pathlib import Path

from prefect import flow
from prefect.client.schemas.objects import State
from prefect.states import Completed, Failed
from pydantic import BaseModel, ConfigDict, Field

from flows.bench.compare import SessionDecision
from flows.cluster.ops.host_layers import host_layers_on
from flows.errors import InconclusiveError, PromotionError
from flows.gates.base import GateResult
from flows.gates.benchmark.story import bench_headline
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.pipeline.artifacts import publish_benchmark, publish_record
from flows.pipeline.events import StageClock, observer_of_run, tell_run_log
from flows.pipeline.gate_loop import run_gates
from flows.pipeline.inputs import inputs_for
from flows.pipeline.notify import label_verdict
from flows.pipeline.prelude import prepared_cluster, versions
from flows.pipeline.previous import (
    benchmarked_previous,
    require_previous,
    require_recorded_arms,
)
from flows.pipeline.quiet_logs import quiet_failed_states
from flows.pipeline.run_label import label_current_run, run_tags, run_title
from flows.pipeline.stages import GATES, QUALIFIED, verdict
from flows.promotion.decision import decide_promotion
from flows.record import write_index
from flows.settings import project_root

RESULTS_DIR = "prefect-results"
INCONCLUSIVE = SessionDecision.FAIL_INCONCLUSIVE.value
INCONCLUSIVE_STATE = "Inconclusive"
"""The name of the Completed state an inconclusive run ends in without waiting (`--no-wait`, a
nightly run): `sparkgate notify`'s automation announces runs entering it."""


refusals: ContextVar[list[QualifyOutcome] | None] = ContextVar("refusals", default=None)
"""Where a command running the flow in its process finds a refused promotion's outcome: when a
pause expired, Prefect's server overrules the flow's final state with its own ("The flow was
failed and never resumed."), which carries no outcome."""


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
    refused: bool = Field(
        default=False, description="The promotion was refused (`promotion` says why): exit 1."
    )
    benchmark: str = Field(
        default="", description="The benchmark session's decision (e.g. fail-inconclusive)."
    )

    @property
    def inconclusive(self) -> bool:
        """No gate failed, but the benchmark's noise allowed no decision: a person decides."""
        return self.failed_gate is None and self.benchmark == INCONCLUSIVE

    @property
    def promoted(self) -> bool:
        """A person's approval promoted it (inside this run)."""
        return self.promotion.startswith("promoted")


# -- the flow ------------------------------------------------------------------------------------


@flow(name="qualify-release", validate_parameters=False)
def qualify_flow(
    release_file: str, cluster_file: str, fresh: bool = False, wait: bool = True
) -> QualifyOutcome | State[QualifyOutcome]:
    """Qualify a release on a cluster, publish its record, then wait for a promotion decision.

    With `wait=False` a passing release ends "awaiting promotion" (`sparkgate promote` later).
    """
    inputs = inputs_for(Path(release_file), Path(cluster_file))
    release, previous, cluster = inputs.release, inputs.previous, inputs.cluster
    quiet_failed_states()
    label_current_run(run_title("qualify", release, cluster), run_tags(release, previous, cluster))
    experiments = project_root() / "experiments"
    require_previous(experiments, inputs.release_file, release, previous, cluster)
    require_recorded_arms(experiments, inputs.release_file, release, cluster)
    previous = benchmarked_previous(experiments, inputs.release_file, release, previous, cluster)
    stages = StageClock(observer_of_run())
    stages.finished("validate", "passed", f"{release.name} on {cluster.name}")
    with prepared_cluster(
        release, cluster, previous=previous, command=_command(release_file), observer=stages,
        resume=not fresh,
    ) as prepared:  # fmt: skip
        record = prepared.record
        with host_layers_on(
            cluster, release.host, prepared.held.transports, say=stages.note,
            on_step=lambda host: record.save_json("host.json", host.model_dump(mode="json")),
        ) as host:  # fmt: skip
            context = replace(prepared.context, host=host) if host else prepared.context
            results = run_gates(
                context, record, prepared.build.digest, fresh=fresh, observer=stages
            )
    text, failed = verdict(results)
    stages.started("verdict")
    stages.finished("verdict", verdict_status(text, failed), text)
    stages.started("record")
    published = record.publish(verdict=text, stage_order=list(GATES), versions=versions(), notes="")
    write_index(experiments)
    publish_record(release.name, published)
    benchmarked = results.get("benchmark")
    points = benchmarked.summary_as(BenchmarkSummary) if benchmarked is not None else None
    if points is not None:
        publish_benchmark(release.name, points)
    stages.finished("record", "passed", str(published))
    label_verdict(text, bench_headline(points) if points is not None else "")
    outcome = QualifyOutcome(
        release=release.name,
        verdict=text,
        failed_gate=failed,
        record=str(published),
        gates={gate: result.outcome.value for gate, result in results.items()},
        stages=stages.statuses(),
        seconds=stages.seconds(),
        benchmark=benchmark_decision(results),
    )
    if failed is not None:  # the flow ends Failed, with the outcome for the caller's summary
        return Failed(message=f"{release.name} {text} (record: {published})", data=outcome)
    if outcome.inconclusive and not wait:  # a person decides later; a notification says so
        said = awaiting_message(release.name, text, release_file, cluster_file, published)
        awaiting = outcome.model_copy(update={"promotion": said})
        return Completed(name=INCONCLUSIVE_STATE, data=awaiting, message=said)
    try:
        decided = decide_promotion(
            release_file, release, published, wait=wait, say=stages.note,
            cluster_file=cluster_file, ask=stages.waiting,
        )  # fmt: skip
    except (PromotionError, InconclusiveError) as refused:  # rejected, or nobody decided
        said = str(refused)
        tell_run_log(said)
        # a rejection is refused (exit 1); an inconclusive wait nobody answered stays
        # inconclusive, awaiting a decision (exit 3)
        ended = outcome.model_copy(
            update={"promotion": said, "refused": isinstance(refused, PromotionError)}
        )
        box = refusals.get()
        if box is not None:
            box.append(ended)
        return Failed(message=said, data=ended)
    return outcome.model_copy(update={"promotion": decided})


def verdict_status(text: str, failed: str | None) -> str:
    """The verdict stage's status on the board: passed, inconclusive (a person decides) or
    failed."""
    if failed is not None:
        return "failed"
    return "passed" if text == QUALIFIED else "inconclusive"


def awaiting_message(
    release: str, verdict_text: str, release_file: str, cluster: str, record: Path
) -> str:
    """The state message of an inconclusive run that ends without waiting: what it found, and
    the one command that accepts it (never promoted by itself)."""
    return (
        f"{release} {verdict_text} (record: {record}); not promoted, awaiting a person's "
        f'decision: sparkgate promote {release_file} -c {cluster} --accept-inconclusive "REASON"'
    )


def benchmark_decision(results: dict[str, GateResult]) -> str:
    """The benchmark session's decision, or "" when the benchmark did not decide."""
    result = results.get("benchmark")
    summary = result.summary_as(BenchmarkSummary) if result is not None else None
    return summary.decision or "" if summary is not None else ""


def _command(release_file: str) -> str:
    return f"sparkgate qualify {release_file}"
