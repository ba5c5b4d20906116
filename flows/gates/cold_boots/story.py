"""The cold-boots gate in a record: boot tables, headline, checks, compare rows and timeline plot.

Pure text from the typed summary, except `plots` (the per-rank timeline) and `recompute`
(flows.gates.cold_boots.recompute: every boot row again from its raw boots/<mode>.json).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from flows.gates.cold_boots.recompute import boots_recomputed
from flows.gates.cold_boots.summary import BootRow, ColdBootsSummary, RankFigures
from flows.gates.markdown import DASH, Row, markdown_table, number
from flows.gates.plotting import pyplot, save, seconds
from flows.gates.story import (
    Earlier,
    PlainStory,
    RecordView,
    Section,
    StageView,
    plot_link,
    side_by_side,
)


def boot_rows(summary: ColdBootsSummary) -> list[Row]:
    """boot | ready | what happened, as the recipe's boot tables read."""
    return [[boot.mode, number(boot.ready_s, "s"), boot.what_happened] for boot in summary.boots]


def boot_detail_rows(summary: ColdBootsSummary) -> list[Row]:
    """Per boot: slowest preparation, kernels compiled/cached, liveness wait, compiles, check."""
    return [
        [
            boot.mode,
            number(boot.prepare_s_max, "s"),
            (f"{boot.kernels} ({boot.compiled} compiled, {boot.cached} cached)"),
            number(boot.liveness_wait_s_max, "s"),
            str(boot.compiles_after_preparation),
            boot.spot_check,
        ]
        for boot in summary.boots
    ]


def boot_failures(boot: BootRow) -> list[str]:
    """Why one boot fails the gate: no ready time, compiles after preparation, a changed output."""
    reasons: list[str] = [f"error: {boot.error}"] if boot.error else []
    if boot.passed is False:
        reasons.append("marked failed by the gate")
    if boot.ready_s is None:
        reasons.append("never ready")
    if boot.compiles_after_preparation != 0:
        reasons.append(f"{boot.compiles_after_preparation} compiles after preparation")
    if boot.spot_check != "identical":
        reasons.append(f"spot check {boot.spot_check}")
    return reasons


def boots_headline(summary: ColdBootsSummary) -> str:
    """e.g. `4 boots, ready 3.1-9.8 s, 0 compiles after preparation`."""
    boots = summary.boots
    ready = [float(b.ready_s) for b in boots if b.ready_s is not None]
    compiles = sum(b.compiles_after_preparation for b in boots)
    span = f"ready {min(ready):.1f}-{max(ready):.1f} s" if ready else "never ready"
    return f"{len(boots)} boots, {span}, {compiles} compiles after preparation"


def boots_problems(summary: ColdBootsSummary, outcome: str) -> list[str]:
    """An outcome of passed while some boot shows a failure."""
    if outcome != "passed":
        return []
    return [
        f"cold_boots: outcome passed, but boot {boot.mode}: {'; '.join(reasons)}"
        for boot in summary.boots
        if (reasons := boot_failures(boot))
    ]


def section(summary: ColdBootsSummary, record: RecordView) -> list[str]:
    """The README section: what happened per boot, the per-boot details, the timeline plot."""
    return [
        "",
        *markdown_table(["boot", "ready", "what happened"], boot_rows(summary)),
        "",
        *markdown_table(
            [
                "boot",
                "slowest preparation",
                "kernels",
                "liveness wait",
                "compiles after preparation",
                "spot check",
            ],
            boot_detail_rows(summary),
        ),
        *plot_link(record, "boots"),
    ]


def _boot_rows(record: RecordView) -> dict[str, BootRow]:
    summary = record.summary_of(ColdBootsSummary)
    return {boot.mode: boot for boot in (summary.boots if summary is not None else [])}


def _boot(boot: BootRow | None) -> str:
    if boot is None:
        return DASH
    return f"{number(boot.ready_s, 's')} ({boot.compiles_after_preparation} compiles)"


def compare(first: RecordView, second: RecordView) -> Section:
    """Each boot mode's ready time and compiles in both records."""
    return side_by_side(
        "cold boots: ready (compiles after preparation)", "boot", (first, second), _boot_rows, _boot
    )


def _boot_ranks(summary: ColdBootsSummary) -> list[tuple[str, RankFigures]]:
    return [
        (boot.mode, rank)
        for boot in summary.boots
        for rank in boot.ranks
        if seconds(rank.prepare_s)
    ]


def plot_boots(summary: ColdBootsSummary, path: Path) -> Path:
    """One bar per boot and rank: preparation, then the liveness wait."""
    plt = pyplot()
    ranks = _boot_ranks(summary)
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(ranks) + 1.5))
    for y, (_mode, rank) in enumerate(ranks):
        prepare, wait = seconds(rank.prepare_s), seconds(rank.liveness_wait_s)
        ax.barh(y, prepare, color="tab:blue", label="preparation" if y == 0 else None)
        ax.barh(
            y, wait, left=prepare, color="tab:orange", label="liveness wait" if y == 0 else None
        )
    ax.set_yticks(range(len(ranks)), [f"{mode} rank {r.rank}" for mode, r in ranks], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    if ax.get_legend_handles_labels()[1]:
        ax.legend(loc="lower right", fontsize=7)
    return save(plt, fig, path)


@dataclass(frozen=True)
class ColdBootsStory(PlainStory):
    """The cold-boots gate as the record tells it."""

    heading: str = "Cold boots"
    short: str = "cold"

    def headline(self, summary: BaseModel) -> str:
        """e.g. `4 boots, ready 3.1-9.8 s, 0 compiles after preparation`."""
        return boots_headline(summary) if isinstance(summary, ColdBootsSummary) else ""

    def problems(self, summary: BaseModel, outcome: str) -> list[str]:
        """A pass beside a failing boot."""
        return boots_problems(summary, outcome) if isinstance(summary, ColdBootsSummary) else []

    def section(self, summary: BaseModel, record: RecordView) -> list[str]:
        """The boot tables and the timeline."""
        return section(summary, record) if isinstance(summary, ColdBootsSummary) else []

    def compare(self, first: RecordView, second: RecordView) -> Section | None:
        """Ready time and compiles per boot mode."""
        return compare(first, second)

    def plots(self, summary: BaseModel, folder: Path) -> list[Path]:
        """The boot timeline, when the summary carries per-rank figures."""
        if not isinstance(summary, ColdBootsSummary) or not _boot_ranks(summary):
            return []
        return [plot_boots(summary, folder / "boots.png")]

    def recompute(self, record: RecordView, stage: StageView, previous: Earlier) -> list[str]:
        """Every boot row again from its raw file."""
        del previous
        return boots_recomputed(record, stage)


COLD_BOOTS_STORY = ColdBootsStory()
