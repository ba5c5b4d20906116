"""`sparkgate approve|reject|promote|rollback`: a person's decision about a qualified release.

`approve` and `reject` answer a qualification that waits (paused) for a decision, from any other
terminal: they find the paused run of that release and resume it with the decision, and the
waiting flow then promotes or records the rejection. `promote` decides later, for a release
qualified with `--no-wait`; `rollback` returns to the previous promoted release on purpose.
With `--deploy` both also start the promoted release on the cluster and verify it; SIGTERM then
cleans up like Ctrl-C (lock released, pointer put back).
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape

from flows.commands.cluster import ClusterOption, cluster_path, load_cluster
from flows.commands.signals import terminate_as_interrupt
from flows.ui.console import err_console

ByOption = Annotated[str | None, typer.Option("--by", help="Who decides (default: your login).")]
ReasonOption = Annotated[str, typer.Option("--reason", help="Why.")]
DeployOption = Annotated[
    bool, typer.Option("--deploy", help="Start it on the cluster, verify, roll back on failure.")
]
ReleaseArgument = Annotated[
    str, typer.Argument(help="Release file or name, e.g. releases/r2.yaml.")
]


def release_file(release: str) -> Path:
    """A release argument as a file: the path given, else releases/NAME.yaml in the project."""
    from flows.errors import SpecError  # noqa: PLC0415
    from flows.settings import project_root  # noqa: PLC0415

    given = Path(release)
    for candidate in (given, project_root() / "releases" / f"{release}.yaml"):
        if candidate.is_file():
            return candidate.resolve()
    raise SpecError("no such release", file=release, expected="a release file or a release name")


def approve(
    release: ReleaseArgument, by: ByOption = None, reason: ReasonOption = ""
) -> None:  # fmt: skip
    """Approve the waiting qualification of RELEASE; it then promotes the release."""
    _resume(release, "approve", by, reason)


def reject(
    release: ReleaseArgument,
    reason: Annotated[str, typer.Option("--reason", help="Why (required).")],
    by: ByOption = None,
) -> None:
    """Reject the waiting qualification of RELEASE (recorded in the promotions log)."""
    _resume(release, "reject", by, reason)


def promote(
    release: ReleaseArgument,
    deploy: DeployOption = False,
    cluster: ClusterOption = "local",
    by: ByOption = None,
    reason: ReasonOption = "",
) -> None:
    """Promote RELEASE now (its latest record must show every gate passed for this build)."""
    from flows.settings import prefect_environment  # noqa: PLC0415

    path = release_file(release)
    target = _cluster_file(cluster) if deploy else None
    prefect_environment()
    from flows.pipeline.promote import promote_release  # noqa: PLC0415

    with terminate_as_interrupt():
        pointer = promote_release(
            path, by=by or getpass.getuser(), reason=reason, cluster_file=target, say=_say
        )
    _print_current(pointer.current.release, pointer.current.record)


def rollback(
    deploy: DeployOption = False,
    cluster: ClusterOption = "local",
    by: ByOption = None,
    reason: ReasonOption = "",
) -> None:
    """Return to the previous promoted release (and deploy it with --deploy)."""
    from flows.settings import prefect_environment  # noqa: PLC0415

    target = _cluster_file(cluster) if deploy else None
    prefect_environment()
    from flows.pipeline.promote import rollback as roll_back  # noqa: PLC0415

    with terminate_as_interrupt():
        pointer = roll_back(
            by=by or getpass.getuser(), reason=reason, cluster_file=target, say=_say
        )
    _print_current(pointer.current.release, pointer.current.record)


def _resume(
    release: str, decision: Literal["approve", "reject"], by: str | None, reason: str
) -> None:
    from flows.settings import prefect_environment  # noqa: PLC0415

    name = Path(release).stem
    prefect_environment()
    from flows.pipeline.promote import Decision, resume_paused  # noqa: PLC0415

    answer = Decision(decision=decision, by=by or getpass.getuser(), reason=reason)
    run = resume_paused(release, answer)
    err_console.print(f"{escape(name)}: {decision} sent to the waiting qualification (run {run})")


def _cluster_file(cluster: str) -> Path:
    load_cluster(cluster)  # validated before anything starts
    return cluster_path(cluster).resolve()


def _say(line: str) -> None:
    err_console.print(escape(line))


def _print_current(release: str, record: str) -> None:
    err_console.print(f"[green]promoted: {escape(release)}[/] (record {escape(record)})")


def register(app: typer.Typer) -> None:
    """Attach `sparkgate approve`, `reject`, `promote` and `rollback`."""
    app.command("approve")(approve)
    app.command("reject")(reject)
    app.command("promote")(promote)
    app.command("rollback")(rollback)
