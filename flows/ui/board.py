"""The qualification's terminal view: every stage with its status and elapsed time.

On a terminal it is a rich Live table that log lines scroll above (Prefect's console handler is
pointed at the same console, so its lines never garble the table); elsewhere (CI, pipes) each
stage transition is one plain line. It is a `StageObserver` (flows.stages): the flow
reports stage events to it and keeps its own times; nothing here knows about Prefect runs or gates.

When the run waits for a person, the prompt (how to answer) is the last thing on screen: below
the live table with the time waited so far, each command whole and pasteable at the terminal's
width (`flows.ui.prompt`), or, in plain output, the last lines printed. The
verdict row shows its status only: the command states the verdict once, when the run ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from flows.stages import STAGE_TITLES, STAGES
from flows.ui.prompt import fit_prompt

VERDICT = "verdict"

_COLOURS = {
    "pending": "dim",
    "running": "bold cyan",
    "passed": "green",
    "cached": "green",
    "skipped": "yellow",
    "failed": "bold red",
    "interrupted": "bold yellow",
    "not run": "dim",
}


@dataclass
class _Row:
    status: str = "pending"
    started: float | None = None
    seconds: float | None = None
    detail: str = ""
    counted: tuple[str, int, int] | None = None  # progress inside the stage: what, done, total


class StageBoard:
    """Stage list with status and elapsed time, live on a terminal, plain lines otherwise."""

    def __init__(self, console: Console, title: str, stages: tuple[str, ...] = STAGES) -> None:
        self.console = console
        self.title = title
        self.rows = {stage: _Row() for stage in stages}
        self._live: Live | None = None
        self._prompt: tuple[str, float] | None = None  # what a person is asked, since when

    def __enter__(self) -> StageBoard:
        if self.console.is_terminal:
            self._live = Live(get_renderable=self.view, console=self.console, refresh_per_second=4)
            self._live.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        stopped = (
            "interrupted" if kind is not None and issubclass(kind, KeyboardInterrupt) else "failed"
        )
        for row in self.rows.values():
            if row.status in ("pending", "running"):
                row.status = "not run" if row.status == "pending" else stopped
        self._prompt = None
        if self._live is not None:
            self._live.refresh()
            self._live.__exit__(kind, value, traceback)
            self._live = None

    def started(self, stage: str) -> None:
        """Mark a stage running."""
        row = self.rows.setdefault(stage, _Row())  # a stage the board did not list: a new row
        row.status, row.started = "running", time.monotonic()
        self._prompt = None
        self._changed(stage)

    def finished(self, stage: str, status: str, detail: str = "") -> None:
        """Mark a stage done: passed, cached, skipped or failed, with a one-line detail."""
        row = self.rows.setdefault(stage, _Row())
        if row.started is not None:
            row.seconds = time.monotonic() - row.started
        row.status, row.detail, row.counted = status, detail, None
        if stage == VERDICT:
            row.detail = ""
        self._prompt = None
        self._changed(stage)

    def progressed(self, what: str, done: int, total: int) -> None:
        """Progress inside the running stage (arms, samples, boots): a bar on a terminal.

        Plain output gets no line per step; the stage's notes already say what happens.
        """
        running = [row for row in self.rows.values() if row.status == "running"]
        if not running:
            return
        running[-1].counted = (what, done, total)
        if self._live is not None:
            self._live.refresh()

    def note(self, line: str) -> None:
        """A progress line printed above the table (a prompt shown is answered: it goes)."""
        self._prompt = None
        self.console.print(escape(line), highlight=False)

    def waiting(self, prompt: str) -> None:
        """Show `prompt` last: below the live table, else as the last lines printed; a second
        prompt while one waits (a hint) goes below the first."""
        if self._prompt is not None:
            self._prompt = (f"{self._prompt[0]}\n{prompt}", self._prompt[1])
        else:
            self._prompt = (prompt, time.monotonic())
        if self._live is not None:
            self._live.refresh()
            return
        self.console.print(prompt, markup=False, highlight=False, soft_wrap=True)

    def view(self) -> RenderableType:
        """What the terminal shows: the table, then the prompt with the time waited, if any;
        the prompt alone when both do not fit the terminal's height (it must stay visible)."""
        table = self.render()
        if self._prompt is None:
            return table
        prompt, since = self._prompt
        fitted = fit_prompt(prompt, self.console.width)  # each command pasteable as shown
        asked = Group(Text(fitted), Text(f"waiting {_clock(time.monotonic() - since)}", "dim"))
        lines = self.console.render_lines
        options = self.console.options
        if len(lines(table, options)) + len(lines(asked, options)) > self.console.height:
            return asked
        return Group(table, asked)

    def statuses(self) -> dict[str, str]:
        """Status of every stage that ran (passed, cached, skipped or failed)."""
        return {s: r.status for s, r in self.rows.items() if r.seconds is not None}

    def render(self) -> Table:
        """The stage table."""
        table = Table(title=self.title, title_justify="left")
        for column, justify in (("stage", "left"), ("status", "left"), ("time", "right"),
                                ("detail", "left")):  # fmt: skip
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        now = time.monotonic()
        for stage, row in self.rows.items():
            elapsed = row.seconds
            if elapsed is None and row.started is not None:
                elapsed = now - row.started
            table.add_row(
                STAGE_TITLES.get(stage, stage),
                f"[{_COLOURS.get(row.status, '')}]{row.status}[/]",
                "" if elapsed is None else f"{elapsed:.1f} s",
                _progress(row.counted) if row.counted else escape(row.detail),
            )
        return table

    def _changed(self, stage: str) -> None:
        if self._live is not None:
            self._live.refresh()
            return
        row = self.rows[stage]
        took = "" if row.seconds is None else f" ({row.seconds:.1f} s)"
        detail = f" - {row.detail}" if row.detail else ""
        self.console.print(
            f"{STAGE_TITLES.get(stage, stage)}: {row.status}{took}{detail}",
            markup=False,
            highlight=False,
        )


def _clock(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def _progress(counted: tuple[str, int, int]) -> Table:
    what, done, total = counted
    cell = Table.grid(padding=(0, 1))
    cell.add_row(ProgressBar(total=max(total, 1), completed=done, width=24),
                 escape(f"{what} {done}/{total}"))  # fmt: skip
    return cell
