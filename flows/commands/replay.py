"""`sparkgate replay LOG...`: captured boot logs through an engine profile's markers.

One file per rank, in rank order (the file's name, without its suffix, names the node). The
profile comes from `--engine FILE` or from the cluster file's `engine`. Prints the timeline the
cold-boots gate would record, every line a marker matched, and the verdict it would reach; exits
0 either way (it judges logs, it does not fail a release), 2 on bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from flows.bounded_read import printable, read_regular
from flows.commands.cluster import ClusterOption, JsonOption, load_cluster
from flows.errors import SpecError
from flows.ui.console import err_console, out_console

MAX_LOG_BYTES = 64 << 20
"""A boot's log is megabytes; a larger file is refused rather than held in memory twice over."""
MAX_LINE = 64 << 10
"""Characters kept of one line: markers match boot lines, never megabytes of one."""


def register(app: typer.Typer) -> None:
    """Attach `sparkgate replay`."""
    app.command("replay")(replay_command)


def replay_command(
    logs: Annotated[list[Path], typer.Argument(help="One captured log per rank, in rank order.")],
    engine: Annotated[
        Path | None, typer.Option("--engine", help="Engine profile file (default: the cluster's).")
    ] = None,
    cluster: ClusterOption = "local",
    as_json: JsonOption = False,
) -> None:
    """Replay captured boot logs through the profile's markers: timeline, compiles, failures."""
    from flows.cluster.boot.replay import RankLog, replay  # noqa: PLC0415
    from flows.spec.engine import EngineProfile  # noqa: PLC0415
    from flows.spec.load import load_model  # noqa: PLC0415

    profile = load_model(engine, EngineProfile) if engine else load_cluster(cluster).engine
    ranks = [
        RankLog(node=path.stem, rank=rank, lines=_lines(path)) for rank, path in enumerate(logs)
    ]
    result = replay(profile, ranks)  # a line nested thousands deep is no event (timeline.py)
    if as_json:
        out_console.print_json(result.model_dump_json())
        return
    table = Table(title=f"boot replayed through {result.profile}", title_justify="left")
    for column in ("rank", "node", "phases (s)", "kernels", "compiled", "prepare s", "late"):
        table.add_column(column)
    for rank in result.timeline.ranks:
        phases = ", ".join(f"{name} {seconds:.1f}" for name, seconds in rank.phases.items())
        table.add_row(
            str(rank.rank), escape(printable(rank.node)), phases or "-", _shown(rank.kernels),
            _shown(rank.compiled),
            _shown(rank.prepare_s), str(rank.compiles_after_preparation),
        )  # fmt: skip
    out_console.print(table)
    if not result.stamped:
        err_console.print("no line carries a `docker logs -t` stamp: phases cannot be timed")
    for event in result.events:
        out_console.print(
            f"rank {event.rank} {event.name}: {printable(event.line.strip()[:160])}",
            markup=False, highlight=False, soft_wrap=True,
        )  # fmt: skip
    out_console.print(f"cold-boots gate: {result.verdict}", markup=False, highlight=False)


def _lines(path: Path) -> list[str]:
    """The log's lines: a regular file of at most MAX_LOG_BYTES, each line cut at MAX_LINE."""
    try:
        raw = read_regular(path, MAX_LOG_BYTES)
    except OSError as error:
        raise SpecError(f"cannot read: {error.strerror or error}", file=path) from None
    if len(raw) > MAX_LOG_BYTES:
        raise SpecError(
            f"log over {MAX_LOG_BYTES >> 20} MiB", file=path, expected="the boot's part of it"
        )
    return [line[:MAX_LINE] for line in raw.decode("utf-8", errors="replace").splitlines()]


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
