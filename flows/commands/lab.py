"""`sparkgate lab up|down`: namespace hosts with sshd on this machine, to try SSH clusters.

The lab lives in `.sparkgate/lab/`: state.json (what was made), known_hosts, the client key and
cluster.yaml, usable as `--cluster lab`.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from flows.settings import project_root, state_dir
from flows.ui.console import err_console, out_console

lab_app = typer.Typer(
    name="lab",
    help="Network-namespace hosts with sshd, for SSH clusters on one machine.",
    no_args_is_help=True,
)


@lab_app.command("up")
def up(
    nodes: Annotated[int, typer.Option("--nodes", "-n", min=1, max=16, help="Hosts.")] = 3,
    docker: Annotated[
        bool, typer.Option("--docker", help="Also start one dockerd per host (docker runtime).")
    ] = False,
) -> None:
    """Create the lab hosts (needs root); replaces a lab recorded earlier."""
    from flows.cluster.lab.hosts import LabPlan, lab_up  # noqa: PLC0415

    lab_dir = state_dir() / "lab"
    state = lab_up(
        LabPlan(nodes=nodes, docker=docker),
        lab_dir,
        engine_file=project_root() / "config" / "engines" / "sparkengine.yaml",
        python=sys.executable,
    )
    for host in state.hosts:
        daemon = f", dockerd unix://{host.dockerd['socket']}" if host.dockerd else ""
        err_console.print(f"{host.name}: {host.address} (sshd pid {host.sshd_pid}{daemon})")
    err_console.print(f"cluster file: {state.cluster_file}  (use --cluster lab)")
    out_console.print(state.cluster_file, markup=False, highlight=False)


@lab_app.command("down")
def down() -> None:
    """Remove exactly what `lab up` recorded: sshds, links, namespaces, bridge, files."""
    from flows.cluster.lab.hosts import lab_down  # noqa: PLC0415

    removed = lab_down(state_dir() / "lab")
    if removed is None:
        err_console.print("no lab recorded: nothing to remove")
        return
    err_console.print(
        f"removed {len(removed.namespaces)} namespaces, {len(removed.links)} links, "
        f"bridge {removed.bridge or '-'} and {len(removed.hosts)} sshds"
    )


def register(app: typer.Typer) -> None:
    """Attach `lab up` and `lab down`."""
    app.add_typer(lab_app)
