"""PNG plots linked from a record's README: benchmark changes with intervals, boot timelines.

Drawn with matplotlib's Agg backend from the stage summaries alone, so any record can be
re-plotted. The boot timeline is drawn when the cold-boots summary carries per-rank figures
(`boots[].ranks[]`): each rank's preparation and liveness wait as stacked bars.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flows.gates.benchmark.summary import BenchmarkSummary, PointRow
from flows.gates.cold_boots.summary import ColdBootsSummary, RankFigures
from flows.record.model import Record
from flows.record.tables import tolerance_pct

_COLORS = {"slower": "red", "faster": "green", "level": "tab:blue"}


def make_plots(record: Record, folder: Path) -> list[Path]:
    """Draw every plot the record's summaries allow; returns the files written."""
    written: list[Path] = []
    bench = record.summary_of(BenchmarkSummary)
    if bench is not None and _bench_points(bench):
        written.append(plot_benchmark(bench, folder / "benchmark.png"))
    boots = record.summary_of(ColdBootsSummary)
    if boots is not None and _boot_ranks(boots):
        written.append(plot_boots(boots, folder / "boots.png"))
    return written


def _bench_points(summary: BenchmarkSummary) -> list[PointRow]:
    return [
        p
        for p in summary.points
        if p.change is not None and p.low is not None and p.high is not None
    ]


def _boot_ranks(summary: ColdBootsSummary) -> list[tuple[str, RankFigures]]:
    return [
        (boot.mode, rank)
        for boot in summary.boots
        for rank in boot.ranks
        if _seconds(rank.prepare_s)
    ]


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _pyplot() -> Any:
    import matplotlib as mpl  # noqa: PLC0415 - heavy; only loaded when plotting

    mpl.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def plot_benchmark(summary: BenchmarkSummary, path: Path) -> Path:
    """Each point's change (percent) with its 95 % interval and the tolerance band."""
    plt = _pyplot()
    points = _bench_points(summary)
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(points) + 1.5))
    for y, point in enumerate(points):
        center, low, high = float(point.change or 0), float(point.low or 0), float(point.high or 0)
        color = _COLORS.get(point.verdict, "orange")
        ax.errorbar(center, y, xerr=[[center - low], [high - center]], fmt="o", color=color)
    tol = tolerance_pct(summary.tolerance)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.axvspan(-tol, tol, color="grey", alpha=0.15, label=f"±{tol:g}% tolerance")
    labels = [f"{p.point} {p.unit}" for p in points]
    ax.set_yticks(range(len(points)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("candidate change against previous, % (95% interval)")
    ax.legend(loc="lower right", fontsize=7)
    return _save(plt, fig, path)


def plot_boots(summary: ColdBootsSummary, path: Path) -> Path:
    """One bar per boot and rank: preparation, then the liveness wait."""
    plt = _pyplot()
    ranks = _boot_ranks(summary)
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(ranks) + 1.5))
    for y, (_mode, rank) in enumerate(ranks):
        prepare, wait = _seconds(rank.prepare_s), _seconds(rank.liveness_wait_s)
        ax.barh(y, prepare, color="tab:blue", label="preparation" if y == 0 else None)
        ax.barh(
            y, wait, left=prepare, color="tab:orange", label="liveness wait" if y == 0 else None
        )
    ax.set_yticks(range(len(ranks)), [f"{mode} rank {r.rank}" for mode, r in ranks], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    if ax.get_legend_handles_labels()[1]:
        ax.legend(loc="lower right", fontsize=7)
    return _save(plt, fig, path)


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path
