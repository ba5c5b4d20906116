"""Find the qualification that waits (paused) for a decision, and resume it with the answer.

`sparkgate approve|reject` run in another terminal than the waiting `qualify`: they ask the
Prefect server the waiting run polls for paused runs of the release, pick the one the decision
is for (refusing a guess between clusters), and resume it with a `Decision`. The waiting run
tells a person how, in `decision_prompt`: the two commands as they run when pasted.

The server is the one PREFECT_API_URL names, else this project's running embedded server, else
the configured server a running `sparkgate qualify` of this project uses (it leaves its URL in
`served_dir()` while it runs), so `approve` in a second terminal without PREFECT_API_URL still
finds a qualification on a Prefect server; when none is found the refusal says how to point at
one.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
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
from flows.fileio import write_text
from flows.settings import project_root

QUALIFY_FLOW = "qualify-release"
RESUME_ATTEMPTS = 10
SERVED_DIR = "served-qualifications"
POINT_AT_A_SERVER = (
    "a qualification on a Prefect server is found with its API URL: "
    "PREFECT_API_URL=http://HOST:4200/api sparkgate approve|reject ..."
)
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
        if url is not None:
            return _resume_on(url, release, decision, cluster_file)
    served = served_urls()
    if not served:
        raise PromotionError(
            f"no paused qualification of {release} is waiting for a decision: no "
            f"`sparkgate qualify` of this project runs here; {POINT_AT_A_SERVER}"
        )
    from prefect.settings import PREFECT_API_URL, temporary_settings  # noqa: PLC0415

    with temporary_settings(updates={PREFECT_API_URL: served[0]}):
        return _resume_on(served[0], release, decision, cluster_file)


def decision_prompt(
    release: str, release_file: str, cluster_file: str | None, timeout_s: int, *,
    server: str | None = None, ui_link: str | None = None,
) -> str:  # fmt: skip
    """What a waiting qualification shows a person: the commands that answer it, as they run
    when pasted into another terminal (with PREFECT_API_URL when the run is on a server), how
    long it waits, and the UI's Resume form when there is a UI."""
    approve, reject = decision_commands(release_file, cluster_file, server=server)
    waits = (
        f"{release} waits for your decision, up to {_duration(timeout_s)} (promotion.timeout_s; "
        "after that, `sparkgate promote` can still decide). Run one of:"
    )
    lines = [waits, f"  {approve}", f'  {reject} --reason "..."']
    if ui_link:
        lines.append(f"or answer the Resume form in the Prefect UI: {ui_link}")
    return "\n".join(lines)


def decision_commands(
    release_file: str, cluster_file: str | None, *, server: str | None = None
) -> tuple[str, str]:
    """`sparkgate approve ...` and `sparkgate reject ...` (its --reason still to add) for the
    run of `release_file` on `cluster_file`, as they run when pasted into a shell of the project
    (with PREFECT_API_URL first when the run is on a server)."""
    name = _reference(Path(release_file), "releases")
    on = f" -c {_reference(Path(cluster_file), 'config')}" if cluster_file else ""
    env = f"PREFECT_API_URL={shlex.quote(server)} " if server else ""
    return f"{env}sparkgate approve {name}{on}", f"{env}sparkgate reject {name}{on}"


def waiting_prompt(
    release: str, release_file: str, cluster_file: str | None, timeout_s: int
) -> str:
    """`decision_prompt` for the running qualification: on a configured server, with that
    server's URL and the run's page in its UI (the embedded server has no UI, and `approve`
    finds it by itself)."""
    from prefect.context import FlowRunContext  # noqa: PLC0415
    from prefect.settings import get_current_settings  # noqa: PLC0415

    from flows.pipeline.embedded import embedded_url  # noqa: PLC0415
    from flows.pipeline.notify import ui_base  # noqa: PLC0415

    server = None if embedded_url() is not None else get_current_settings().api.url
    context = FlowRunContext.get()
    ui_link = None
    if server and context is not None and context.flow_run is not None:
        ui_link = f"{ui_base().rstrip('/')}/runs/flow-run/{context.flow_run.id}"
    return decision_prompt(
        release, release_file, cluster_file, timeout_s, server=server, ui_link=ui_link
    )


def _reference(path: Path, folder: str) -> str:
    """How a command names `path`: NAME when it is the project's folder/NAME.yaml, else the path
    (relative to the project root when inside it), quoted for a shell."""
    root = project_root()
    if (root / folder / f"{path.stem}.yaml").resolve() == path.resolve():
        return shlex.quote(path.stem)
    with contextlib.suppress(ValueError):
        path = path.resolve().relative_to(root)
    return shlex.quote(str(path))


def _duration(seconds: int) -> str:
    """86400 -> "24 h", 90 -> "90 s": the unit a person reads the wait in."""
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= 2 * size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def served_dir() -> Path:
    """Where a running `sparkgate qualify` on a configured server leaves that server's URL."""
    from prefect.settings import get_current_settings  # noqa: PLC0415

    return Path(get_current_settings().home) / SERVED_DIR


@contextlib.contextmanager
def served_by(url: str) -> Iterator[None]:
    """While a qualification of this project runs on the server at `url`, say so in
    `served_dir()`, so that `approve`/`reject` without PREFECT_API_URL find it there (the URL
    only: credentials stay in each terminal's environment)."""
    advert = served_dir() / f"{os.getpid()}.url"
    write_text(advert, url + "\n")
    try:
        yield
    finally:
        advert.unlink(missing_ok=True)


def served_urls() -> list[str]:
    """The servers running qualifications of this project use, newest first (a killed run's
    URL may linger: that server then answers that nothing waits)."""
    from flows.pipeline.embedded import advertised  # noqa: PLC0415

    return advertised(served_dir())


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
    run = waiting_run(runs, release, cluster_file, where=f" on the Prefect server at {url}")
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


def waiting_run(
    runs: Sequence[_Run], release: str, cluster_file: Path | None, where: str = ""
) -> _Run:
    """The paused run a decision about `release` (on `cluster_file`, when given) is for.

    Refused when none waits (saying `where` it looked, and how to look on another server), and
    when runs of `release` wait on several clusters and none was named: an approval moves the
    pointer of the run's cluster, so it must not be a guess.
    """
    matching = [run for run in runs if matches_release(release, run.parameters)]
    if cluster_file is not None:
        matching = [run for run in matching if matches_cluster(cluster_file, run.parameters)]
    if not matching:
        on = f" on {cluster_file}" if cluster_file is not None else ""
        raise PromotionError(
            f"no paused qualification of {release}{on} is waiting for a decision{where}"
            + (f"; {POINT_AT_A_SERVER}" if where else "")
        )
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
