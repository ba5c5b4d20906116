"""`sparkgate qualify RELEASE`: run the qualification flow with a live stage board.

Every file is validated before anything starts (bad input exits 2 and nothing runs); then the
Prefect flow runs in this process (embedded Prefect unless PREFECT_API_URL names a server) with
the stage board on stderr (Prefect's own lines only with -v), and the run closes with the
verdict, said once, as the last line; in plain output (CI, pipes), a table of the stages and
the record's path before it (on a terminal the board stays on screen and is that table). A
release that waits for a decision shows how to answer last, below the board. The exit code
follows the decision, as `bench compare`'s does: 0 qualified (or, waiting, an inconclusive
benchmark a person accepted and promoted), 1 a gate failed (or the promotion was rejected), 2
bad input, 3 the benchmark was inconclusive and nobody accepted it: never a pass, never
"failed"; the release awaits a person's decision (`promote --accept-inconclusive "REASON"`).
"""

from __future__ import annotations

import contextlib
import json
import textwrap
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml
from rich.markup import escape
from rich.table import Table

from flows.commands.cluster import ClusterOption, JsonOption, cluster_path
from flows.commands.signals import terminate_as_interrupt
from flows.errors import GateFailedError, InconclusiveError, PromotionError, SparkgateError
from flows.names import release_path
from flows.stages import STAGE_TITLES, STAGES
from flows.ui.console import err_console, out_console

if TYPE_CHECKING:
    from prefect.client.schemas.objects import State

    from flows.pipeline.announce import Announcer
    from flows.pipeline.embedded import Backend
    from flows.pipeline.plan import QualificationPlan
    from flows.pipeline.qualify import QualifyOutcome
    from flows.ui.board import StageBoard

VerboseOption = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", help="Also show Prefect's own log lines (run names, task states)."
    ),
]


def qualify(  # noqa: PLR0917 - typer maps parameters to options
    release: Annotated[
        str, typer.Argument(help="Release name or file, e.g. r2 or releases/r2.yaml.")
    ],
    cluster: ClusterOption = "local",
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Start over instead of resuming finished gates.")
    ] = False,
    no_wait: Annotated[
        bool,
        typer.Option(
            "--no-wait", help="End as 'qualified, awaiting promotion' instead of waiting."
        ),
    ] = False,
    as_json: JsonOption = False,
    plan: Annotated[
        bool,
        typer.Option(
            "--plan",
            help="Print every command, container and HTTP call per node and stage; run nothing.",
        ),
    ] = False,
    verbose: VerboseOption = False,
) -> None:
    """Qualify RELEASE on the cluster: gates in order, then the experiments record.

    Exits 0 when qualified, 1 when a gate failed, 2 on bad input and 3 when the benchmark was
    inconclusive and not accepted (its noise allowed no decision: never a pass; approve it with
    --accept-inconclusive "REASON"). With --plan, prints what it would do and exits 0, touching
    nothing.
    """
    from flows.pipeline.embedded import launched_backend  # noqa: PLC0415
    from flows.pipeline.inputs import (  # noqa: PLC0415
        benchmark_resolution,
        given_inputs,
        load_inputs,
    )
    from flows.pipeline.plan import qualification_plan  # noqa: PLC0415
    from flows.pipeline.previous import (  # noqa: PLC0415
        require_previous,
        require_recorded_arms,
    )
    from flows.settings import prefect_environment, project_root, state_dir  # noqa: PLC0415

    inputs = load_inputs(release_path(release), cluster_path(cluster))
    chosen, spec = inputs.release, inputs.cluster
    experiments = project_root() / "experiments"
    for line in benchmark_resolution(inputs, experiments):  # refuses what it cannot resolve
        err_console.print(f"benchmark: {line}", markup=False, highlight=False)
    if plan:
        _print_plan(qualification_plan(inputs, experiments), as_json=as_json)
        return
    require_previous(experiments, inputs.release_file, chosen, inputs.previous, spec)
    require_recorded_arms(experiments, inputs.release_file, chosen, spec)
    prefect_environment()
    # SIGTERM (a CI job's timeout, `kill`) ends the run as Ctrl-C does: cleaned up, announced.
    # The server boots while the flow and Prefect are imported; watched_run waits for it.
    with terminate_as_interrupt(), launched_backend(state_dir() / "prefect") as backend:
        from flows.pipeline.announce import embedded_announcer  # noqa: PLC0415
        from flows.pipeline.events import current_observer  # noqa: PLC0415
        from flows.pipeline.qualify import qualify_flow, refusals  # noqa: PLC0415 - imports prefect

        title = f"qualify {chosen.name} on {spec.name}"
        refused: list[QualifyOutcome] = []
        with watched_run(title, backend, verbose=verbose) as board:
            announcer = embedded_announcer(board, inputs, warn=_warn)
            token, handed = current_observer.set(announcer or board), given_inputs.set(inputs)
            told = refusals.set(refused)
            try:
                state = qualify_flow(
                    str(inputs.release_file.resolve()), str(inputs.cluster_file.resolve()),
                    fresh, not no_wait,
                    return_state=True,
                )  # fmt: skip
            except KeyboardInterrupt as stop:
                if announcer is not None:
                    announcer.ended(
                        "Crashed", f"{chosen.name} interrupted ({str(stop) or 'Ctrl-C'})"
                    )
                err_console.print(
                    f"interrupted: `sparkgate qualify {release}` again resumes at the first "
                    "gate without a result (--fresh starts over)",
                    markup=False,
                    highlight=False,
                )
                raise
            finally:
                refusals.reset(told)
                given_inputs.reset(handed)
                current_observer.reset(token)
    outcome = _announced(chosen.name, state, refused, announcer)
    if as_json:
        out_console.print_json(json.dumps(outcome.model_dump(mode="json")))
    conclude(chosen.name, outcome, str(state.message))


def conclude(release: str, outcome: QualifyOutcome, message: str) -> None:
    """The end of the run on stderr: the summary, then the verdict once, as the last line (a
    failure's is the error the command exits with)."""
    _print_summary(release, outcome)
    error = verdict_error(outcome, message)
    if error is not None:
        raise error
    promotion = f", {outcome.promotion}" if outcome.promotion else ""
    err_console.print(f"{escape(release)}: {escape(outcome.verdict)}{escape(promotion)}")


@contextlib.contextmanager
def watched_run(
    title: str, backend: Backend, *, verbose: bool, stages: tuple[str, ...] = STAGES
) -> Iterator[StageBoard]:
    """`backend` once ready (the server for a run of this command) and the run's board on
    stderr, with Prefect's own lines only when `verbose`; on a configured server, its URL left
    where `approve` looks."""
    from flows.promotion.paused import served_by  # noqa: PLC0415
    from flows.ui.board import StageBoard  # noqa: PLC0415
    from flows.ui.prefect_log import show_prefect_log  # noqa: PLC0415

    show_prefect_log(err_console, verbose=verbose)
    with backend.ready() as url, contextlib.ExitStack() as stack:
        if backend.server is None:
            stack.enter_context(served_by(url))
        yield stack.enter_context(StageBoard(err_console, title, stages))


def verdict_error(outcome: QualifyOutcome, message: str) -> SparkgateError | None:
    """The error a verdict exits with: none when qualified (or a person accepted an
    inconclusive benchmark and it was promoted), 1 when a gate failed or the promotion was
    refused (rejected, or a qualified run nobody decided on in time), 3 when the benchmark was
    inconclusive and it was not promoted (awaiting a person's decision)."""
    if outcome.refused:  # its own words, also when Prefect's orchestration ended the wait first
        return PromotionError(outcome.promotion or message)
    if outcome.inconclusive and not outcome.promoted:
        return InconclusiveError(outcome.promotion or message)
    if outcome.failed_gate is not None:
        return GateFailedError(message)
    return None


def _announced(
    release: str, state: State[Any], refused: list[QualifyOutcome], announcer: Announcer | None
) -> QualifyOutcome:
    """The run's outcome; an embedded run that failed, was refused, crashed or ended
    inconclusive says so to the project's webhook (`sparkgate notify`) first."""
    from flows.pipeline.qualify import INCONCLUSIVE_STATE  # noqa: PLC0415 - imports prefect

    try:
        outcome = refused[-1] if refused else _outcome(release, state)
    except SparkgateError as error:  # an exception in the flow: no outcome to publish
        if announcer is not None:
            announcer.ended("Crashed" if state.is_crashed() else "Failed", str(error))
        raise
    ended = "Failed" if refused else state.name
    if announcer is not None and ended in ("Failed", "Crashed", INCONCLUSIVE_STATE):
        said = outcome.promotion if refused else str(state.message or "")
        announcer.ended(ended, said, outcome.record)
    return outcome


def _warn(line: str) -> None:
    err_console.print(line, markup=False, highlight=False)


def _outcome(release: str, state: State[Any]) -> QualifyOutcome:
    """The flow's outcome (a failed gate's too); a crash or a refusal is raised as an error."""
    from flows.pipeline.qualify import QualifyOutcome  # noqa: PLC0415 - imports prefect

    value = state.result(raise_on_failure=False)
    if isinstance(value, QualifyOutcome):
        return value
    if isinstance(value, SparkgateError):
        raise value
    if isinstance(value, BaseException):
        raise GateFailedError(f"{release}: qualification failed: {value}") from value
    raise GateFailedError(f"{release}: qualification failed: {state.message}")


def _print_summary(release: str, outcome: QualifyOutcome) -> None:
    """Every stage with its outcome and seconds, then the record, where no live board shows
    them (its last row is the record); the verdict follows once, as the last line."""
    if err_console.is_terminal:  # the board stays on screen: the same table
        return
    table = Table(title=f"{escape(release)}: stages", title_justify="left")
    table.add_column("stage")
    table.add_column("outcome")
    table.add_column("seconds", justify="right")
    for stage, seconds in outcome.seconds.items():
        status = outcome.stages.get(stage, "")
        table.add_row(STAGE_TITLES.get(stage, stage), escape(status), f"{seconds:.1f}")
    err_console.print(table)
    err_console.print(f"record: {escape(outcome.record)}")


def _print_plan(plan: QualificationPlan, *, as_json: bool) -> None:
    """The plan on stdout: JSON, or per stage one block per node with its details as YAML."""
    if as_json:
        out_console.print_json(plan.model_dump_json())
        return
    out_console.print(
        f"qualify {plan.release} on {plan.cluster} ({plan.shape}): plan, nothing is run",
        markup=False, highlight=False,
    )  # fmt: skip
    stage = None
    for step in plan.steps:
        if step.stage != stage:
            stage = step.stage
            out_console.rule(STAGE_TITLES.get(stage, stage))
        out_console.print(
            f"{step.node}: {step.action}", markup=False, highlight=False, soft_wrap=True
        )
        if step.detail:
            details = yaml.safe_dump(step.detail, sort_keys=False, width=96).rstrip()
            out_console.print(
                textwrap.indent(details, "    "), markup=False, highlight=False, soft_wrap=True
            )


def register(app: typer.Typer) -> None:
    """Attach `sparkgate qualify`."""
    app.command("qualify")(qualify)
