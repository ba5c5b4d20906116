"""The in-flow decision: at the end of a passing qualification, pause for a person, then promote
the record the form showed, or log the rejection or the wait that ran out.

The record is read once, shown in the form, and that same record is what an approval promotes:
a release qualified on two cluster shapes has two records, and "the latest record" might be the
other one.
"""

from __future__ import annotations

import contextlib
import math
from datetime import UTC, datetime
from pathlib import Path

import httpx
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run

from flows.errors import InconclusiveError, PromotionError, SparkgateError
from flows.lines import LineSink
from flows.promotion.description import decision_description
from flows.promotion.models import LogEntry
from flows.promotion.paused import Decision, InconclusiveDecision, waiting_prompt
from flows.promotion.promote import log_rejection, promote_release
from flows.promotion.rules import relative_to_root
from flows.promotion.store import append_log
from flows.record import read_record
from flows.record.decisions import needs_acceptance
from flows.record.model import Record
from flows.settings import project_root
from flows.spec.release import Release

AWAITING = "awaiting promotion"
POLL_S = 1


def decide_promotion(
    release_file: str,
    release: Release,
    record: Path,
    *,
    wait: bool,
    say: LineSink,
    cluster_file: str | None = None,
    ask: LineSink | None = None,
) -> str:
    """At the end of a passing qualification: wait for a person, then promote or reject.

    Runs inside the qualify flow (it pauses that flow run). Without `wait` the release stays
    qualified and awaits `sparkgate promote`. A rejection is logged and raised. The decision is
    about the record at `record`, as the form shows it, on the cluster it was qualified on (its
    `cluster_name`): an approval checks that record and moves that cluster's pointer only.
    The prompt (how to answer, `waiting_prompt`) goes to `ask`, else to `say`.
    """
    if not wait:
        return AWAITING
    shown = described_record(record)
    cluster = shown.cluster_name if shown is not None else None
    timeout = pause_timeout_s(release)
    (ask or say)(waiting_prompt(release.name, release_file, cluster_file, timeout))
    undecided = shown is not None and needs_acceptance(shown)
    if undecided:
        (ask or say)(accepting_hint(release.name))
    form = (InconclusiveDecision if undecided else Decision).with_initial_data(
        description=decision_description(release.name, shown, str(record)),
        decision="approve",
    )
    try:
        answer = pause_flow_run(wait_for_input=form, timeout=timeout, poll_interval=POLL_S)
    except FlowPauseTimeout as error:
        entry, message = no_decision(
            release, release_file, record, timeout, cluster=cluster, cluster_file=cluster_file,
            inconclusive=undecided,
        )  # fmt: skip
        append_log(project_root(), entry)
        fail_expired_pause(message)
        raise (InconclusiveError if undecided else PromotionError)(message) from error
    if answer is None:  # pragma: no cover - pause_flow_run with an input always returns one
        raise PromotionError(f"{release.name}: the decision came back empty")
    if answer.decision == "reject":
        log_rejection(release.name, by=answer.by, reason=answer.reason, cluster=cluster)
        raise PromotionError(f"{release.name} rejected by {answer.by}: {answer.reason}")
    if shown is None:
        raise PromotionError(
            f"{release.name}: approved, but its record {record} could not be read, so the form "
            "showed nothing to approve; nothing was promoted"
        )
    accepted = getattr(answer, "accept_inconclusive", "")
    promote_release(
        release_file, by=answer.by, reason=answer.reason, cluster=cluster, shown=shown, say=say,
        accept_inconclusive=accepted,
    )  # fmt: skip
    if accepted:
        return f"promoted by {answer.by}, inconclusive benchmark accepted: {accepted}"
    return f"promoted by {answer.by}"


def accepting_hint(release: str) -> str:
    """The lines a paused inconclusive run adds: approving it needs a reason (the command on a
    line of its own, as the prompt's are, so it pastes whole)."""
    return (
        f"the benchmark of {release} was inconclusive: approving it needs a reason:\n"
        f'  sparkgate approve {release} --accept-inconclusive "REASON"'
    )


def pause_timeout_s(release: Release) -> int:
    """How long the paused qualification waits: promotion.timeout_s, whole seconds, at least 1."""
    return max(1, math.ceil(release.promotion.timeout_s))


def no_decision(
    release: Release,
    release_file: str,
    record: Path,
    timeout: int,
    *,
    cluster: str | None = None,
    cluster_file: str | None = None,
    inconclusive: bool = False,
) -> tuple[LogEntry, str]:
    """The log line and the flow's failure message when nobody decided within `timeout` s.

    The record stays published and qualified; only the wait ended, so `promote` can decide later
    for the cluster it qualified on: the command shown names its cluster file when known (a
    cluster's name is a `-c` only when config/NAME.yaml holds it).
    """
    stored = relative_to_root(record, project_root())
    detail = f"no decision within {timeout} s (promotion.timeout_s)"
    entry = LogEntry(
        at=datetime.now(UTC), action="no-decision", release=release.name, by="sparkgate",
        reason="", cluster=cluster, record=stored, detail=detail,
    )  # fmt: skip
    chosen = cluster_file or cluster
    on = f" -c {chosen}" if chosen is not None else ""
    found, accept = (
        ("inconclusive", ' --accept-inconclusive "REASON"') if inconclusive else ("qualified", "")
    )
    message = (
        f"{release.name}: {found}, but {detail}; the record {stored} stands: decide later "
        f"with `sparkgate promote {release_file}{on}{accept}`"
    )
    return entry, message


def fail_expired_pause(message: str) -> None:
    """End the running flow run Failed with `message` now, itself.

    Once a pause has expired, Prefect's server refuses every later state of the run and fails
    it with its own words ("The flow was failed and never resumed."), so the Failed state the
    flow returns, which names the reason, would never be the run's state message in the UI.
    Forced, it is (the flow's own Failed follows it and changes nothing). Nothing outside a
    flow run; a server that cannot be reached leaves Prefect's words (the run's log still
    names the reason).
    """
    from prefect.client.orchestration import get_client  # noqa: PLC0415
    from prefect.context import FlowRunContext  # noqa: PLC0415
    from prefect.states import Failed  # noqa: PLC0415

    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return
    with contextlib.suppress(OSError, httpx.HTTPError), get_client(sync_client=True) as client:
        client.set_flow_run_state(context.flow_run.id, Failed(message=message), force=True)


def described_record(path: Path) -> Record | None:
    """The published record the pause describes, or None when it cannot be read."""
    try:
        return read_record(path)
    except SparkgateError:
        return None
