"""`sparkgate approve|reject|promote|rollback`: a person's decision about a qualified release.

`approve` and `reject` answer a qualification that waits (paused) for a decision, from any other
terminal: they find the paused run of that release and resume it with the decision, and the
waiting flow then promotes or records the rejection on the cluster it qualified on (`-c` picks
one when qualifications of the release wait on several clusters). `promote` decides later, for a
release qualified with `--no-wait`; `rollback` returns to the previous promoted release on
purpose. Both act on one cluster's pointer: `-c CLUSTER`, else the default cluster `local`, as
every other command; no other cluster's pointer moves. With `--deploy` both also start the
promoted release on that cluster and verify it; SIGTERM then cleans up like Ctrl-C (lock
released, pointer put back).
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape

from flows.commands.cluster import cluster_path, load_cluster
from flows.commands.signals import terminate_as_interrupt
from flows.promotion.models import DEFAULT_CLUSTER
from flows.ui.console import err_console

ByOption = Annotated[str | None, typer.Option("--by", help="Who decides (default: your login).")]
ReasonOption = Annotated[str, typer.Option("--reason", help="Why.")]
DeployOption = Annotated[
    bool, typer.Option("--deploy", help="Start it on the cluster, verify, roll back on failure.")
]
ClusterOption = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        "-c",
        help="Whose pointer: a cluster file, or a name: config/NAME.yaml, or `lab` "
        "(default: local).",
    ),
]
WaitingOnOption = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        "-c",
        help="The qualification waiting on this cluster (file or name; default: the one that "
        "waits).",
    ),
]
AcceptOption = Annotated[
    str,
    typer.Option(
        "--accept-inconclusive",
        help="Why you accept a benchmark that could not decide (required to approve or promote "
        "an inconclusive qualification; kept in the promotions log with who accepted it).",
    ),
]
ReleaseArgument = Annotated[
    str, typer.Argument(help="Release file or name, e.g. releases/r2.yaml.")
]


def release_file(release: str) -> Path:
    """A release argument as a file: the path given, else releases/NAME.yaml in the project."""
    from flows.names import release_path  # noqa: PLC0415

    return release_path(release).resolve()


def approve(
    release: ReleaseArgument,
    by: ByOption = None,
    reason: ReasonOption = "",
    cluster: WaitingOnOption = None,
    accept_inconclusive: AcceptOption = "",
) -> None:
    """Approve the waiting qualification of RELEASE; it then promotes the release on its cluster.

    A qualification whose benchmark was inconclusive is approved only with
    --accept-inconclusive "REASON"; without it the answer is refused and the run still waits.
    """
    _resume(release, "approve", by, reason, cluster, accept_inconclusive=accept_inconclusive)


def reject(
    release: ReleaseArgument,
    reason: Annotated[str, typer.Option("--reason", help="Why (required).")],
    by: ByOption = None,
    cluster: WaitingOnOption = None,
) -> None:
    """Reject the waiting qualification of RELEASE (recorded in the promotions log)."""
    _resume(release, "reject", by, reason, cluster)


def promote(  # noqa: PLR0917 - typer maps parameters to options
    release: ReleaseArgument,
    deploy: DeployOption = False,
    cluster: ClusterOption = None,
    by: ByOption = None,
    reason: ReasonOption = "",
    accept_inconclusive: AcceptOption = "",
) -> None:
    """Promote RELEASE on one cluster now (its latest record must pass every gate, this build;
    with -c, a record on that cluster's shape)."""
    from flows.settings import prefect_environment  # noqa: PLC0415

    path = release_file(release)
    name, target = pointer_cluster(cluster, deploy=deploy)
    shape = load_cluster(cluster).shape if cluster is not None else None
    prefect_environment()
    from flows.promotion.promote import promote_release  # noqa: PLC0415

    before = _current_release(name)
    with terminate_as_interrupt():
        pointer = promote_release(
            path, by=by or getpass.getuser(), reason=reason, cluster=name, cluster_file=target,
            shape=shape, say=_say, accept_inconclusive=accept_inconclusive,
        )  # fmt: skip
    _print_current(name, pointer.current.release, pointer.current.record, before)


def rollback(
    deploy: DeployOption = False,
    cluster: ClusterOption = None,
    by: ByOption = None,
    reason: ReasonOption = "",
) -> None:
    """Return one cluster to its previous promoted release (and deploy it with --deploy)."""
    from flows.settings import prefect_environment  # noqa: PLC0415

    name, target = pointer_cluster(cluster, deploy=deploy)
    prefect_environment()
    from flows.promotion.promote import rollback as roll_back  # noqa: PLC0415

    before = _current_release(name)
    with terminate_as_interrupt():
        pointer = roll_back(
            by=by or getpass.getuser(), reason=reason, cluster=name, cluster_file=target,
            say=_say,
        )  # fmt: skip
    _print_current(name, pointer.current.release, pointer.current.record, before)


def pointer_cluster(option: str | None, *, deploy: bool) -> tuple[str, Path | None]:
    """Whose pointer a command moves, and the cluster file to deploy to (None: no deploy).

    A `-c` given must name a valid cluster file (SpecError, exit 2, before anything moves); its
    `name` keys the pointer. Without `-c` the pointer is the default cluster's (`local`), and
    only a deploy needs its file.
    """
    if option is None and not deploy:
        return DEFAULT_CLUSTER, None
    chosen = option or DEFAULT_CLUSTER
    loaded = load_cluster(chosen)  # validated before anything starts
    return loaded.name, cluster_path(chosen).resolve() if deploy else None


def _resume(
    release: str,
    decision: Literal["approve", "reject"],
    by: str | None,
    reason: str,
    cluster: str | None,
    *,
    accept_inconclusive: str = "",
) -> None:
    from flows.settings import prefect_environment  # noqa: PLC0415

    name = Path(release).stem
    waiting_on = None
    if cluster is not None:
        load_cluster(cluster)  # validated before anything is sent
        waiting_on = cluster_path(cluster).resolve()
    prefect_environment()
    from flows.promotion.paused import (  # noqa: PLC0415
        Decision,
        InconclusiveDecision,
        resume_paused,
    )

    who = by or getpass.getuser()
    answer = (
        InconclusiveDecision(
            decision=decision, by=who, reason=reason, accept_inconclusive=accept_inconclusive
        )
        if accept_inconclusive
        else Decision(decision=decision, by=who, reason=reason)
    )
    run = resume_paused(release, answer, waiting_on)
    err_console.print(f"{escape(name)}: {decision} sent to the waiting qualification (run {run})")


def _say(line: str) -> None:
    err_console.print(escape(line))


def _current_release(cluster: str) -> str | None:
    """The release a cluster's pointer names now (None: nothing promoted there yet)."""
    from flows.promotion.store import read_pointer  # noqa: PLC0415
    from flows.settings import project_root  # noqa: PLC0415

    pointer = read_pointer(project_root(), cluster)
    return pointer.current.release if pointer is not None else None


def _print_current(cluster: str, release: str, record: str, before: str | None) -> None:
    """The pointer now; `already` when it named this release before the command too."""
    already = "already " if before == release else ""
    err_console.print(
        f"[green]{already}promoted on {escape(cluster)}: {escape(release)}[/] "
        f"(record {escape(record)})"
    )


def register(app: typer.Typer) -> None:
    """Attach `sparkgate approve`, `reject`, `promote` and `rollback`."""
    app.command("approve")(approve)
    app.command("reject")(reject)
    app.command("promote")(promote)
    app.command("rollback")(rollback)
