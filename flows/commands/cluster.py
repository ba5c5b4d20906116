"""`sparkgate cluster ...` and `sparkgate doctor`: look at and administer a cluster.

Other areas add their subcommands (start, stop, status, logs) to `cluster_app` from their own
module: list that module in `EXTENSIONS` and decorate its functions with
`@cluster_app.command()`. `load_cluster` is the one way a `--cluster` option becomes a model.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from flows.errors import ClusterError, SpecError
from flows.settings import project_root, state_dir
from flows.spec.cluster import Cluster
from flows.ui.console import err_console, out_console

cluster_app = typer.Typer(
    name="cluster", help="Start, stop, inspect and unlock a cluster.", no_args_is_help=True
)

EXTENSIONS: tuple[str, ...] = ("flows.commands.boot",)
"""Modules (e.g. `flows.commands.boot`) that add commands to `cluster_app` when imported."""

ClusterOption = Annotated[
    str,
    typer.Option(
        "--cluster",
        "-c",
        help="Cluster file, or a name: config/NAME.yaml, or `lab` for the lab from `lab up`.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]


def cluster_path(option: str) -> Path:
    """Resolve --cluster: an existing file, config/NAME.yaml, or the lab's own cluster file."""
    given = Path(option)
    candidates = [given] if given.suffix in (".yaml", ".yml") else []
    candidates.append(project_root() / "config" / f"{option}.yaml")
    if option == "lab":
        candidates.append(state_dir() / "lab" / "cluster.yaml")
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise SpecError(
        f"no cluster file for {option!r}",
        file=option,
        expected=" or ".join(str(c) for c in candidates) + " to exist",
    )


def load_cluster(option: str) -> Cluster:
    """The validated cluster named by a --cluster option (SpecError, exit 2, if invalid)."""
    from flows.spec.load import load_model  # noqa: PLC0415 - keeps CLI startup fast

    return load_model(cluster_path(option), Cluster)


@cluster_app.command("unlock")
def unlock(
    cluster: ClusterOption = "local",
    force: Annotated[
        bool, typer.Option("--force", help="Remove the lock whoever holds it.")
    ] = False,
) -> None:
    """Remove the cluster lock left by a run that is gone (shows the holder first)."""
    from flows.cluster.ops.lock import force_unlock, lock_settings, read_lock  # noqa: PLC0415
    from flows.cluster.transport.factory import TransportPool  # noqa: PLC0415

    spec = load_cluster(cluster)
    path = lock_settings(spec).path
    with TransportPool(spec) as pool:
        holder = read_lock(pool.head, path)
        if holder is None:
            err_console.print(f"{spec.name}: not locked ({path} on {spec.head.name})")
            return
        if not force:
            raise ClusterError(
                f"{spec.name} is locked by {holder.holder} on {holder.host} (pid {holder.pid}) "
                f"running `{holder.command}`; add --force to remove the lock"
            )
        force_unlock(pool.head, path)
    err_console.print(
        f"{spec.name}: removed the lock of {holder.holder} on {holder.host} (pid {holder.pid}) "
        f"running `{holder.command}`"
    )


def doctor(cluster: ClusterOption = "local", as_json: JsonOption = False) -> None:
    """Preflight every node: reachability, host keys, disk, memory, ports, runtime, clocks."""
    from flows.cluster.ops.preflight import run_preflight  # noqa: PLC0415
    from flows.cluster.transport.factory import TransportPool  # noqa: PLC0415

    spec = load_cluster(cluster)
    with TransportPool(spec) as pool:
        report = run_preflight(spec, lambda node: pool.node(node.name))
    if as_json:
        out_console.print_json(json.dumps(report.model_dump(mode="json")))
    else:
        colours = {"OK": "green", "WARN": "yellow", "ERROR": "bold red"}
        table = Table(title=f"preflight of {spec.name}")
        for column in ("node", "check", "status", "detail"):
            table.add_column(column)
        for line in report.results:
            status = f"[{colours[line.status]}]{line.status}[/]"
            table.add_row(escape(line.node), escape(line.check), status, escape(line.detail))
        err_console.print(table)
    report.raise_for_errors()


def register(app: typer.Typer) -> None:
    """Attach `cluster ...` (with every extension's commands) and `doctor`."""
    for module in EXTENSIONS:
        importlib.import_module(module)
    app.add_typer(cluster_app)
    app.command("doctor")(doctor)
