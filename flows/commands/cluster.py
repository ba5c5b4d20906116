"""`sparkgate cluster start|stop|status|logs|unlock` and `sparkgate doctor`: run a cluster by hand.

`start` takes the cluster lock for the boot (a qualification in progress is never disturbed),
builds and installs the release, boots it while printing each rank's phases as they happen, and
ends with the boot timeline; SIGTERM cleans up like Ctrl-C (ranks started so far stopped, lock
released). The running ranks are remembered in the project's state folder so
the other commands, in later processes, act on exactly those ranks. `load_cluster` is the one
way a `--cluster` option becomes a model (every command group uses it).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from flows import names
from flows.commands.signals import terminate_as_interrupt
from flows.errors import ClusterError
from flows.settings import state_dir
from flows.spec.cluster import Cluster
from flows.ui.console import err_console, out_console

cluster_app = typer.Typer(
    name="cluster", help="Start, stop, inspect and unlock a cluster.", no_args_is_help=True
)

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
    """Resolve --cluster: a cluster name or file (flows.names, the resolver every command uses)."""
    return names.cluster_path(option)


def load_cluster(option: str) -> Cluster:
    """The validated cluster named by a --cluster option (SpecError, exit 2, if invalid)."""
    from flows.spec.load import load_model  # noqa: PLC0415 - keeps CLI startup fast

    return load_model(cluster_path(option), Cluster)


ReleaseArgument = Annotated[str, typer.Argument(help="Release file, e.g. releases/r1.yaml.")]


@cluster_app.command("start")
def start(
    release: ReleaseArgument,
    cluster: ClusterOption = "local",
    empty_cache: Annotated[
        list[str] | None,
        typer.Option(
            "--empty-cache",
            help="Empty a cache kind before booting: KIND (every node) or KIND@NODE. Repeatable.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Build, install and boot RELEASE on the cluster; print the boot timeline."""
    from flows.cluster.boot.caches import parse_target  # noqa: PLC0415
    from flows.cluster.boot.session import load_session, start_release  # noqa: PLC0415
    from flows.cluster.ops.lock import ClusterLock, lock_settings  # noqa: PLC0415
    from flows.cluster.runtime.factory import check_fits  # noqa: PLC0415
    from flows.cluster.transport.factory import TransportPool  # noqa: PLC0415
    from flows.spec.launch import render_all  # noqa: PLC0415
    from flows.spec.load import load_model  # noqa: PLC0415
    from flows.spec.release import Release  # noqa: PLC0415

    spec = load_cluster(cluster)
    release_file = names.release_path(release)
    chosen = load_model(release_file, Release)
    check_fits(spec, chosen, release_file, cluster_path(cluster))
    plans = render_all(spec, chosen)
    targets = [target for item in empty_cache or [] for target in parse_target(item, plans)]
    running = load_session(state_dir(), spec.name)
    if running is not None:
        raise ClusterError(
            f"cluster {spec.name} already runs {running.release} (started "
            f"{running.started_at:%Y-%m-%d %H:%M:%S} UTC); `sparkgate cluster stop` first"
        )
    clock = time.monotonic()
    with terminate_as_interrupt(), TransportPool(spec) as pool:
        transports = {node.name: pool.node(node.name) for node in spec.nodes}
        with ClusterLock(pool.head, lock_settings(spec)):
            started = start_release(
                spec, chosen, transports, state_dir(), empty=targets,
                on_event=_print_event, say=lambda line: err_console.print(escape(line)),
            )  # fmt: skip
    session = started.session
    if as_json:
        out_console.print_json(session.model_dump_json())
        return
    _print_timeline(session.timeline.model_dump(mode="json"))
    head = next(h for h in session.handles if h.head)
    err_console.print(
        f"[green]{spec.name} serves {chosen.name}[/] at {head.plan.ready_url} - ready in "
        f"{session.timeline.ready_s:.1f} s (boot wall {started.wall_s:.1f} s, command "
        f"{time.monotonic() - clock:.1f} s); stop with `sparkgate cluster stop -c {cluster}`"
    )


@cluster_app.command("stop")
def stop(cluster: ClusterOption = "local") -> None:
    """Stop every rank that `cluster start` left running (signal, grace, then kill)."""
    from flows.cluster.boot.session import load_session, stop_session  # noqa: PLC0415
    from flows.cluster.transport.factory import TransportPool  # noqa: PLC0415

    spec = load_cluster(cluster)
    if slot := _slot_status(spec.name):
        err_console.print(f"{spec.name}: concurrency slot {escape(slot)}")
    session = load_session(state_dir(), spec.name)
    if session is None:
        err_console.print(f"{spec.name}: nothing started by sparkgate is running")
        return
    with TransportPool(spec) as pool:
        transports = {node.name: pool.node(node.name) for node in spec.nodes}
        statuses = stop_session(spec, session, transports, state_dir())
    for handle, status in zip(session.handles, statuses, strict=True):
        err_console.print(f"{handle.node} rank {handle.rank}: {status.describe()}")
    err_console.print(f"[green]{spec.name}: stopped {session.release}[/]")


@cluster_app.command("status")
def status(cluster: ClusterOption = "local", as_json: JsonOption = False) -> None:
    """Each rank of the running session: state, last phase, pid or container, uptime."""
    from flows.cluster.boot.session import load_session  # noqa: PLC0415
    from flows.cluster.boot.timeline import LogReader  # noqa: PLC0415
    from flows.cluster.runtime.factory import runtime_for  # noqa: PLC0415
    from flows.cluster.transport.factory import TransportPool  # noqa: PLC0415

    spec = load_cluster(cluster)
    if slot := _slot_status(spec.name):
        err_console.print(f"{spec.name}: concurrency slot {escape(slot)}")
    session = load_session(state_dir(), spec.name)
    if session is None:
        err_console.print(f"{spec.name}: nothing started by sparkgate is running")
        return
    rows = []
    with TransportPool(spec) as pool:
        runtime = runtime_for(spec, {node.name: pool.node(node.name) for node in spec.nodes})
        now = datetime.now(UTC)
        for handle in sorted(session.handles, key=lambda h: h.rank):
            state = runtime.status(handle)
            reader = LogReader(spec.engine.logs, node=handle.node, rank=handle.rank)
            events = reader.read(runtime.read_log(handle).splitlines())
            rows.append(
                {
                    "node": handle.node,
                    "rank": handle.rank,
                    "state": state.describe(),
                    "phase": events[-1].name if events else "",
                    "id": handle.container or str(handle.pid),
                    "uptime_s": round((now - handle.started_at).total_seconds()),
                }
            )
    if as_json:
        out_console.print_json(json.dumps({"release": session.release, "ranks": rows}))
        return
    table = Table(title=f"{spec.name}: {session.release} ({session.image or session.build[:12]})")
    for column in ("node", "rank", "state", "last phase", "pid/container", "uptime"):
        table.add_column(column)
    for row in rows:
        colour = "green" if row["state"] == "running" else "red"
        table.add_row(
            escape(str(row["node"])), str(row["rank"]), f"[{colour}]{row['state']}[/]",
            escape(str(row["phase"])), escape(str(row["id"])), f"{row['uptime_s']} s",
        )  # fmt: skip
    err_console.print(table)


@cluster_app.command("logs")
def logs(
    cluster: ClusterOption = "local",
    node: Annotated[str | None, typer.Option("--node", "-n", help="Only this node.")] = None,
    tail: Annotated[int, typer.Option("--tail", help="Last N lines per rank (0: all).")] = 0,
) -> None:
    """Print the logs of the running session's ranks."""
    from flows.cluster.boot.session import load_session  # noqa: PLC0415
    from flows.cluster.runtime.factory import runtime_for  # noqa: PLC0415
    from flows.cluster.transport.factory import TransportPool  # noqa: PLC0415

    spec = load_cluster(cluster)
    session = load_session(state_dir(), spec.name)
    if session is None:
        raise ClusterError(f"{spec.name}: no running session to show logs of")
    handles = [h for h in session.handles if node is None or h.node == node]
    if not handles:
        raise ClusterError(f"{spec.name}: no node {node!r} in the running session")
    with TransportPool(spec) as pool:
        runtime = runtime_for(spec, {n.name: pool.node(n.name) for n in spec.nodes})
        for handle in handles:
            lines = runtime.read_log(handle).splitlines()
            err_console.rule(f"{handle.node} rank {handle.rank}")
            for line in lines[-tail:] if tail else lines:
                out_console.print(line, markup=False, highlight=False, soft_wrap=True)


@cluster_app.command("unlock")
def unlock(
    cluster: ClusterOption = "local",
    force: Annotated[
        bool, typer.Option("--force", help="Remove the lock whoever holds it.")
    ] = False,
) -> None:
    """Remove the cluster lock left by a run that is gone (shows the holder first); with --force
    also give back the cluster's Prefect concurrency slot (server mode)."""
    from flows.cluster.ops.lock import force_unlock, lock_settings, read_lock  # noqa: PLC0415
    from flows.cluster.transport.factory import TransportPool  # noqa: PLC0415

    spec = load_cluster(cluster)
    path = lock_settings(spec).path
    if force:
        _release_slot(spec.name)
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


def _slot_status(cluster: str) -> str | None:
    """Who holds the cluster's slot on the configured Prefect server (None in embedded mode)."""
    from flows.settings import prefect_environment  # noqa: PLC0415

    prefect_environment()
    from flows.pipeline.schedule import slot_status  # noqa: PLC0415

    try:
        return slot_status(cluster)
    except Exception as error:  # noqa: BLE001 - the ranks are still worth showing
        return f"unknown: the Prefect server did not answer ({type(error).__name__}: {error})"


def _release_slot(cluster: str) -> None:
    """Give back the cluster's slot on the configured Prefect server (none in embedded mode)."""
    from flows.settings import prefect_environment  # noqa: PLC0415

    prefect_environment()
    from flows.cluster.ops.slot_holder import liveness  # noqa: PLC0415
    from flows.pipeline.schedule import read_holder, release_slot, server_mode, slot_name  # noqa: PLC0415

    holder = read_holder(cluster) if server_mode() else None
    if freed := release_slot(cluster):
        held = f", held by {holder.describe(liveness(holder))}" if holder else ""
        err_console.print(
            f"{cluster}: gave back {freed} taken slot of {slot_name(cluster)!r}{escape(held)}"
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


def _print_event(event: object) -> None:
    from flows.cluster.boot.timeline import LogEvent  # noqa: PLC0415

    assert isinstance(event, LogEvent)
    shown = {k: v for k, v in event.figures.items() if k != "rank" and len(str(v)) <= 40}
    figures = ", ".join(f"{k}={v}" for k, v in shown.items())
    colour = "red" if event.is_failure else "cyan"
    err_console.print(
        f"  {escape(event.node)} rank {event.rank}: [{colour}]{event.name}[/] {escape(figures)}"
    )


def _print_timeline(timeline: dict[str, object]) -> None:
    table = Table(title="boot timeline (seconds since start)")
    for column in ("node", "rank", "loaded", "prepared", "kernels", "compiled/cached",
                   "prepare s", "liveness wait s", "met", "ready"):  # fmt: skip
        table.add_column(column, justify="right")
    ranks = timeline["ranks"]
    assert isinstance(ranks, list)
    for rank in ranks:
        phases = rank["phases"]
        table.add_row(
            escape(rank["node"]), str(rank["rank"]),
            _cell(phases.get("weights_loaded")), _cell(phases.get("kernels_prepared")),
            _cell(rank["kernels"]), f"{_cell(rank['compiled'])}/{_cell(rank['cached'])}",
            _cell(rank["prepare_s"]), _cell(rank["liveness_wait_s"]),
            _cell(phases.get("rendezvous")), _cell(phases.get("ready")),
        )  # fmt: skip
    err_console.print(table)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def register(app: typer.Typer) -> None:
    """Attach `cluster ...` and `doctor`."""
    app.add_typer(cluster_app)
    app.command("doctor")(doctor)
