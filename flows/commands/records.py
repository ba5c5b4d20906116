"""`sparkgate records`, `show`, `verify` and `compare`: how reviewers read experiments records.

These commands only read (except `records --write-index`, which regenerates the derived
experiments/README.md). A RECORD argument is a folder path, a folder name under the experiments
folder, or a release name (its newest record).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markdown import Markdown
from rich.table import Table

from flows.errors import RecordError
from flows.gates.registry import GATES, REGISTRY
from flows.promotion.models import LOG_FILE, LogEntry
from flows.record import compare as record_compare
from flows.record.decisions import deciding_entry, decision_of
from flows.record.index import gate_cell, write_index
from flows.record.model import README_FILE, Record
from flows.record.outcome import found as found_by
from flows.record.reader import broken_records, find_record, list_records, read_record
from flows.record.readme import RENDER_VERSION, render_readme
from flows.record.verify import verify
from flows.settings import project_root
from flows.ui.console import err_console, out_console

ExperimentsOption = Annotated[
    Path | None,
    typer.Option("--experiments", help="Folder of records (default: experiments/ of the project)."),
]
RecordArgument = Annotated[str, typer.Argument(help="Record folder, folder name or release name.")]
_STYLE = {
    "passed": "green", "failed": "bold red", "skipped": "yellow", "faster": "green",
    "level": "green", "slower": "bold red", "inconclusive": "bold yellow", "lost": "bold red",
}  # fmt: skip


def register(app: typer.Typer) -> None:
    """Attach records, show, verify and compare to the root app."""
    app.command("records")(records)
    app.command("show")(show)
    app.command("verify")(verify_record)
    app.command("compare")(compare)


def _experiments(given: Path | None) -> Path:
    return given if given is not None else project_root() / "experiments"


def records(
    experiments: ExperimentsOption = None,
    write: Annotated[
        bool, typer.Option("--write-index", help="Regenerate experiments/README.md too.")
    ] = False,
    brief: Annotated[
        bool,
        typer.Option("--brief", help="A few lines: verdicts, calibration, headline changes."),
    ] = False,
) -> None:
    """List every record: date, release, previous, each gate's verdict and headline numbers."""
    folder = _experiments(experiments)
    if brief:
        from flows.record.aa_ledger import CALIBRATION_DIR  # noqa: PLC0415
        from flows.record.brief import brief_lines  # noqa: PLC0415

        calibrations = list_records(folder / CALIBRATION_DIR)
        for line in brief_lines(list_records(folder), calibrations, folder):
            out_console.print(line, markup=False, highlight=False, soft_wrap=True)
        return
    table = records_table(folder, width=out_console.width)
    out_console.print(table)
    for problem in broken_records(folder):
        err_console.print(f"skipped: {problem}", markup=False, highlight=False)
    if write:
        err_console.print(f"wrote {write_index(folder)}", markup=False, highlight=False)


WIDE_COLUMNS = 140
"""From this terminal width the table shows each gate's headline, not only its outcome word."""
GATE_COLUMNS = 110
"""From this width a narrower table still has a column per gate (outcome words); below it the
verdict, which names the gate that failed, stands for them."""
BENCH = "benchmark"
"""The gate whose finding (faster, level, slower, inconclusive) `records` shows at any width."""
BENCH_SHORT = "bench"
_STYLE_DECISION = {"promoted": "green", "rejected": "bold red", "awaiting": "yellow"}


def decisions_log(folder: Path) -> list[LogEntry]:
    """The promotions log kept beside the records (experiments/promotions.jsonl); none: []."""
    path = folder / LOG_FILE.name
    if not path.is_file():
        return []
    return [LogEntry.model_validate_json(line) for line in path.read_text().splitlines() if line]


def records_table(folder: Path, *, width: int) -> Table:
    """Every record, newest first, with the decision a person took on it.

    Words are never cut: cells wrap at spaces. Wide, each gate shows its headline; narrower,
    its outcome word; at 80 columns the per-gate columns give way to the verdict, which names
    the gate that failed and why, and the benchmark's outcome. The benchmark's word is what it
    found (faster, level, slower, inconclusive), never only passed or failed.
    """
    table = Table(title=f"records in {folder}")
    wide, gates = width >= WIDE_COLUMNS, width >= GATE_COLUMNS
    if wide:
        columns = ["date", "record", "release", "previous", *GATES, "verdict", "decision"]
    else:
        shorts = [gate.story.short for gate in REGISTRY] if gates else [BENCH_SHORT]
        columns = ["record", "prev", *shorts, "verdict", "decision"]
    for column in columns:
        # a record name is never wrapped; every other cell wraps whole words
        table.add_column(column, no_wrap=column in ("record", "decision"), overflow="fold")
    log = decisions_log(folder)
    for record in reversed(list_records(folder)):
        found = found_by(record, BENCH)
        cells = [_found_cell(gate_cell(record, gate), found) if gate == BENCH else
                 gate_cell(record, gate) for gate in GATES]  # fmt: skip
        if wide:
            first = [record.date, record.name, record.release_name, record.previous or "-"]
        else:
            first = [record.name, record.previous or "-"]
            cells = [cell.split(":", 1)[0] for cell in cells] if gates else [found]
        decision = decision_of(record, log)
        styled = (
            f"[{_STYLE_DECISION[decision]}]{decision}[/]"
            if decision in _STYLE_DECISION
            else decision
        )
        table.add_row(
            *first,
            *(_styled(cell) for cell in cells),
            _styled(record.verdict or record.status),
            styled,
        )
    return table


def _found_cell(cell: str, found: str) -> str:
    """The benchmark's cell with what it found in place of its passed/failed word."""
    word, colon, rest = cell.partition(":")
    return f"{found}{colon}{rest}" if word in ("passed", "failed", "inconclusive") else cell


def _styled(text: str) -> str:
    head = text.split(":", 1)[0]
    style = _STYLE.get(head)
    escaped = text.replace("[", "\\[")
    return f"[{style}]{escaped}[/]" if style else escaped


def show(
    record: RecordArgument,
    experiments: ExperimentsOption = None,
    raw: Annotated[bool, typer.Option("--raw", help="Print the markdown as is.")] = False,
) -> None:
    """Print a record's README (verdict, what changed, every gate's tables).

    A record still in progress has no README yet: it is rendered from what is saved so far.
    """
    root = _experiments(experiments)
    folder = find_record(root, record)
    readme = folder / README_FILE
    found = read_record(folder)
    text = readme.read_text() if readme.is_file() else render_readme(found)
    # the person's decision came after the README was published: said beside it, on stderr
    err_console.print(decision_line(found, decisions_log(root)), markup=False, highlight=False)
    if raw:
        out_console.print(text, markup=False, highlight=False, soft_wrap=True)
    else:
        out_console.print(Markdown(text))


def decision_line(record: Record, log: list[LogEntry]) -> str:
    """What a person decided about a record (it is published before anyone decides, so its
    README cannot say): who, when, why, and the reason for accepting an inconclusive benchmark."""
    found = f"benchmark {found_by(record, BENCH)}"
    entry = deciding_entry(record, log)
    if entry is None:
        return f"{record.name}: {found}; decision: {decision_of(record, log)}"
    why = f": {entry.reason}" if entry.reason else ""
    when = f"{entry.at:%Y-%m-%d %H:%M} UTC"
    line = f"{record.name}: {found}; decision: {entry.action} by {entry.by} at {when}{why}"
    if entry.accepted_inconclusive:
        line += f"; inconclusive benchmark accepted: {entry.accepted_inconclusive}"
    return line


def verify_record(record: RecordArgument, experiments: ExperimentsOption = None) -> None:
    """Recompute every verdict and table from the raw files; exit 1 listing any mismatch."""
    folder = find_record(_experiments(experiments), record)
    problems = verify(folder)
    if problems:
        listed = "\n".join(f"- {problem}" for problem in problems)
        raise RecordError(f"{folder}: {len(problems)} problem(s):\n{listed}")
    found = read_record(folder)
    files = sum(len(stage.files) + 1 for stage in found.stages.values())
    readme = (
        "README recomputed"
        if found.render_version == RENDER_VERSION
        else "README of an older layout checked by its hash"
    )
    err_console.print(
        f"{folder}: verified ({len(found.stages)} stages, {files} stage files, {readme})",
        markup=False,
        highlight=False,
    )


def compare(
    record_a: RecordArgument,
    record_b: RecordArgument,
    experiments: ExperimentsOption = None,
) -> None:
    """Two records side by side: gates, benchmark points, determinism and boots."""
    root = _experiments(experiments)
    first = read_record(find_record(root, record_a))
    second = read_record(find_record(root, record_b))
    for title, header, rows in record_compare.sections(first, second):
        table = Table(title=title)
        for column in header:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*(cell.replace("[", "\\[") for cell in row))
        out_console.print(table)
