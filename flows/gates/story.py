"""What a gate tells about itself once it ran: README section, tables, compare rows, plots, checks.

The record renders, compares, plots and verifies every gate alike by looping over the registry
and asking each gate's story (`Gate.story`); nothing in `flows.record` names a gate. Stories
read a record through the read-only views below, which `flows.record.model.Record` satisfies
as it is, so gates never import the record package (it depends on them, not the other way).
Every story is pure except `plots` (it draws files) and `recompute` (it reads the raw files).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from flows.gates.markdown import Row

S = TypeVar("S", bound=BaseModel)
T = TypeVar("T")
Section = tuple[str, list[str], list[Row]]
"""A compare section: title, header (first column, then one per record), rows."""


class FileView(Protocol):
    """One file a record lists, as it was when saved."""

    @property
    def path(self) -> str:
        """Relative to the record folder."""
        ...

    @property
    def sha256(self) -> str:
        """Hex SHA-256 at save time."""
        ...


class StageView(Protocol):
    """One finished stage of a record."""

    @property
    def stage(self) -> str:
        """The stage (and its folder's) name."""
        ...

    @property
    def outcome(self) -> str:
        """passed, failed or skipped."""
        ...

    @property
    def started_at(self) -> datetime:
        """When the stage started."""
        ...

    @property
    def summary(self) -> BaseModel | None:
        """The gate's typed summary (None for a gate that produced none)."""
        ...

    @property
    def files(self) -> Sequence[FileView]:
        """The raw files the gate wrote."""
        ...


class RecordView(Protocol):
    """A record as a gate's story reads it."""

    @property
    def name(self) -> str:
        """The record's folder name."""
        ...

    @property
    def folder(self) -> Path | None:
        """Where it lives (None for a record built in memory)."""
        ...

    @property
    def release_name(self) -> str:
        """The release it qualified (or calibrated)."""
        ...

    @property
    def previous(self) -> str | None:
        """The previous release it was compared with."""
        ...

    @property
    def release(self) -> dict[str, Any]:
        """The resolved release spec."""
        ...

    @property
    def cluster(self) -> dict[str, Any]:
        """The resolved cluster spec."""
        ...

    @property
    def stages(self) -> Mapping[str, StageView]:
        """Every finished stage by name."""
        ...

    @property
    def plots(self) -> Sequence[FileView]:
        """The plots the README links."""
        ...

    def summary_of(self, model: type[S]) -> S | None:
        """The summary of the stage whose summary is a `model`."""
        ...

    def saved_json(self, relative: str) -> Any:
        """A listed file as JSON while it is unchanged since it was saved (else None)."""
        ...


Earlier = Callable[[], RecordView | None]
"""The record of the previous release a stage was compared with, looked up only when asked."""


class GateStory(Protocol):
    """Everything the record and the plan say about one gate."""

    @property
    def heading(self) -> str:
        """The README section's title."""
        ...

    @property
    def short(self) -> str:
        """The gate's column in a narrow table."""
        ...

    def headline(self, summary: BaseModel) -> str:
        """One line of headline figures (index, README verdict table, `records`)."""
        ...

    def problems(self, summary: BaseModel, outcome: str) -> list[str]:
        """Everything in the summary that contradicts itself or the outcome."""
        ...

    def section(self, summary: BaseModel, record: RecordView) -> list[str]:
        """The README section's lines below the outcome line."""
        ...

    def compare(self, first: RecordView, second: RecordView) -> Section | None:
        """Two records side by side (None: the gate has no rows to compare)."""
        ...

    def brief(self, newest: RecordView | None, calibration: RecordView | None) -> list[str]:
        """Lines for the brief of all records (`make demo`'s last words)."""
        ...

    def plots(self, summary: BaseModel, folder: Path) -> list[Path]:
        """Draw the gate's plots into `folder`; the files written."""
        ...

    def recompute(self, record: RecordView, stage: StageView, previous: Earlier) -> list[str]:
        """Differences between the stage's summary and its raw files read again."""
        ...

    def found(self, summary: BaseModel) -> str:
        """What the gate found in one word beyond its outcome (the benchmark's faster, level,
        slower, inconclusive), for `records`, the brief and a README's lead; "" for none."""
        ...

    def leading(self, summary: BaseModel) -> list[str]:
        """Lines a record's README leads with after its verdict (the benchmark's largest gated
        changes with their intervals); [] for none."""
        ...


def plot_link(record: RecordView, stem: str) -> list[str]:
    """The README's link to plots/<stem>.png when the record lists that plot."""
    path = f"plots/{stem}.png"
    if any(plot.path == path for plot in record.plots):
        return ["", f"![{stem}]({path})"]
    return []


class PlainStory:
    """The parts of a story a gate may have nothing for: no compare rows, brief lines, plots,
    findings beyond the outcome or lines to lead a README with."""

    def compare(self, first: RecordView, second: RecordView) -> Section | None:
        """No rows to compare."""
        del first, second
        return None

    def brief(self, newest: RecordView | None, calibration: RecordView | None) -> list[str]:
        """Nothing for the brief."""
        del newest, calibration
        return []

    def plots(self, summary: BaseModel, folder: Path) -> list[Path]:
        """No plots."""
        del summary, folder
        return []

    def found(self, summary: BaseModel) -> str:
        """Nothing beyond the outcome."""
        del summary
        return ""

    def leading(self, summary: BaseModel) -> list[str]:
        """Nothing to lead the README with."""
        del summary
        return []


def side_by_side(
    title: str,
    key: str,
    records: tuple[RecordView, RecordView],
    rows: Callable[[RecordView], Mapping[str, T]],
    cell: Callable[[T | None], str],
) -> Section:
    """A compare section: rows matched by name, a name only one record has shows its cell of
    None (a dash) on the other side; the first record's order, then the second's new names."""
    first, second = records
    a, b = rows(first), rows(second)
    names = list(a) + [name for name in b if name not in a]
    return (
        title,
        [key, first.name, second.name],
        [[name, cell(a.get(name)), cell(b.get(name))] for name in names],
    )
