"""Find the qualification that waits (paused) for a decision, and resume it with the answer.

`sparkgate approve|reject` run in another terminal than the waiting `qualify`: they ask the
Prefect server the waiting run polls for paused runs of the release, pick the one the decision
is for (refusing a guess between clusters), and resume it with a `Decision`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import httpx
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.flow_runs import resume_flow_run
from prefect.input import RunInput
from pydantic import ConfigDict, Field

from flows.errors import PromotionError

QUALIFY_FLOW = "qualify-release"
RESUME_ATTEMPTS = 10
_T = TypeVar("_T")


class Decision(RunInput):
    """What a person answers to a paused qualification (CLI `approve`/`reject` or the UI form)."""

    decision: Literal["approve", "reject"] = Field(description="approve or reject the release")
    by: str = Field(min_length=1, description="who decides")
    reason: str = Field(default="", description="why")


ACCEPT_FIELD = "accept_inconclusive"
_ACCEPT_RULE: dict[str, Any] = {
    "if": {"properties": {"decision": {"const": "approve"}}},
    "then": {
        "properties": {ACCEPT_FIELD: {"minLength": 1, "pattern": r"\S"}},
        "required": [ACCEPT_FIELD],
    },
}
"""JSON Schema the server checks an answer against before it resumes the run: approving needs a
reason that is not blank (the run stays paused otherwise); rejecting does not."""


class InconclusiveDecision(Decision):
    """The answer to a qualification whose benchmark was inconclusive: approving it needs an
    explicit reason for accepting that (CLI `approve --accept-inconclusive`, or the UI field)."""

    model_config = ConfigDict(json_schema_extra=_ACCEPT_RULE)

    accept_inconclusive: str = Field(
        default="",
        description="approve only: why you accept a benchmark that could not decide (required "
        "to approve)",
    )


class _HasParameters(Protocol):
    @property
    def parameters(self) -> dict[str, Any]: ...


_Run = TypeVar("_Run", bound=_HasParameters)


def resume_paused(release: str, decision: Decision, cluster_file: Path | None = None) -> str:
    """Find the paused qualification of `release` (a name or its file) and resume it; the run id.

    With `cluster_file`, only a qualification on that cluster is resumed; without it, the one
    waiting run of `release`, refused (naming their clusters) when runs on several clusters wait.

    Talks to the server the waiting run polls: PREFECT_API_URL, else this project's running
    embedded server (a waiting `sparkgate qualify` keeps one). Retries while a database is
    locked or a server answers 503.
    """
    from flows.pipeline.embedded import running_backend  # noqa: PLC0415

    with running_backend() as url:
        if url is None:
            raise PromotionError(
                f"no paused qualification of {release} is waiting for a decision "
                "(no `sparkgate qualify` of this project is running)"
            )
        return _resume_on(url, release, decision, cluster_file)


def _resume_on(url: str, release: str, decision: Decision, cluster_file: Path | None) -> str:
    paused = FlowRunFilter(
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]))
    )
    named = FlowFilter(name=FlowFilterName(any_=[QUALIFY_FLOW]))
    try:
        with get_client(sync_client=True) as client:
            runs = _retry(lambda: client.read_flow_runs(flow_filter=named, flow_run_filter=paused))
    except (RuntimeError, OSError, httpx.TransportError) as error:  # the server went away
        raise PromotionError(f"could not reach the Prefect API at {url}: {error}") from error
    run = waiting_run(runs, release, cluster_file)
    answer = decision.model_dump(mode="json")
    try:
        _retry(lambda: resume_flow_run(run.id, run_input=answer))
    except RuntimeError as error:  # the server checked the answer against the run's form
        raise PromotionError(refused_answer(release, str(error))) from None
    return str(run.id)


def refused_answer(release: str, said: str) -> str:
    """What the server's refusal of an answer means, saying the flag when it is the missing
    (or unexpected) acceptance of an inconclusive benchmark; the run still waits either way."""
    if ACCEPT_FIELD not in said:
        return f"{release}: the waiting qualification refused the answer ({said}); it still waits"
    if "Additional properties" in said:
        return (
            f"{release}: its benchmark was not inconclusive, so there is nothing to accept; "
            f"approve without --accept-inconclusive (the qualification still waits)"
        )
    return (
        f"{release}: its benchmark was inconclusive, so approving needs a reason: "
        f'sparkgate approve {release} --accept-inconclusive "REASON" (the qualification still '
        "waits; `reject --reason` declines it)"
    )


def waiting_run(runs: Sequence[_Run], release: str, cluster_file: Path | None) -> _Run:
    """The paused run a decision about `release` (on `cluster_file`, when given) is for.

    Refused when none waits, and when runs of `release` wait on several clusters and none was
    named: an approval moves the pointer of the run's cluster, so it must not be a guess.
    """
    matching = [run for run in runs if matches_release(release, run.parameters)]
    if cluster_file is not None:
        matching = [run for run in matching if matches_cluster(cluster_file, run.parameters)]
    if not matching:
        on = f" on {cluster_file}" if cluster_file is not None else ""
        raise PromotionError(f"no paused qualification of {release}{on} is waiting for a decision")
    clusters = sorted({str(run.parameters.get("cluster_file", "")) for run in matching})
    if len(clusters) > 1:
        raise PromotionError(
            f"qualifications of {release} wait on several clusters ({', '.join(clusters)}); "
            "name one with -c CLUSTER"
        )
    return matching[0]


def matches_release(release: str, parameters: Mapping[str, Any]) -> bool:
    """Whether a run qualifies `release`: that very file when a file is given, else by name."""
    file = Path(str(parameters.get("release_file", "")))
    given = Path(release)
    if given.is_file():
        return file == given.resolve()
    return file.stem == release


def matches_cluster(cluster_file: Path, parameters: Mapping[str, Any]) -> bool:
    """Whether a qualification run ran on the cluster of `cluster_file` (the same file)."""
    given = parameters.get("cluster_file")
    return given is not None and Path(str(given)).resolve() == cluster_file.resolve()


def _retry(call: Callable[[], _T]) -> _T:
    for attempt in range(RESUME_ATTEMPTS):
        try:
            return call()
        except Exception as error:
            text = str(error)
            if attempt + 1 == RESUME_ATTEMPTS or not (
                "database is locked" in text or "503" in text
            ):
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")
