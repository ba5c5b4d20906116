"""PNG plots linked from a record's README: benchmark changes with intervals, boot timelines.

Drawn with matplotlib's Agg backend from the stage summaries alone, so any record can be
re-plotted. The boot timeline is drawn when the cold-boots summary carries per-rank figures
(`boots[].ranks[]`): phase times (`phases`, as flows.cluster.boot.timeline.RankTimeline dumps them)
where present, else each rank's preparation and liveness wait as stacked bars.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flows.record.model import Record
from flows.record.tables import tolerance_pct

_COLORS = {"slower": "red", "faster": "green", "level": "tab:blue"}


def make_plots(record: Record, folder: Path) -> list[Path]:
    """Draw every plot the record's summaries allow; returns the files written."""
    written: list[Path] = []
    bench = record.stages.get("benchmark")
    if bench is not None and _bench_points(bench.summary):
        written.append(plot_benchmark(bench.summary, folder / "benchmark.png"))
    boots = record.stages.get("cold_boots")
    if boots is not None and _boot_ranks(boots.summary):
        written.append(plot_boots(boots.summary, folder / "boots.png"))
    return written


def _bench_points(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        p
        for p in summary.get("points", [])
        if all(isinstance(p.get(k), int | float) for k in ("change", "low", "high"))
    ]


def _boot_ranks(summary: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return [
        (str(boot.get("mode")), rank)
        for boot in summary.get("boots", [])
        for rank in boot.get("ranks") or []
        if isinstance(rank, Mapping)
        and (isinstance(rank.get("phases"), Mapping) or _seconds(rank.get("prepare_s")))
    ]


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _pyplot() -> Any:
    import matplotlib as mpl  # noqa: PLC0415 - heavy; only loaded when plotting

    mpl.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def plot_benchmark(summary: Mapping[str, Any], path: Path) -> Path:
    """Each point's change (percent) with its 95 % interval and the tolerance band."""
    plt = _pyplot()
    points = _bench_points(summary)
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(points) + 1.5))
    for y, point in enumerate(points):
        center, low, high = float(point["change"]), float(point["low"]), float(point["high"])
        color = _COLORS.get(str(point.get("verdict")), "orange")
        ax.errorbar(center, y, xerr=[[center - low], [high - center]], fmt="o", color=color)
    tol = tolerance_pct(summary.get("tolerance", 0.03))
    ax.axvline(0, color="black", linewidth=0.8)
    ax.axvspan(-tol, tol, color="grey", alpha=0.15, label=f"±{tol:g}% tolerance")
    labels = [f"{p.get('point')} {p.get('unit', '')}" for p in points]
    ax.set_yticks(range(len(points)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("candidate change against previous, % (95% interval)")
    ax.legend(loc="lower right", fontsize=7)
    return _save(plt, fig, path)


def plot_boots(summary: Mapping[str, Any], path: Path) -> Path:
    """One bar per boot and rank: phases since boot start, or preparation then liveness wait."""
    plt = _pyplot()
    ranks = _boot_ranks(summary)
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(ranks) + 1.5))
    for y, (_mode, rank) in enumerate(ranks):
        phases = rank.get("phases")
        if isinstance(phases, Mapping):
            _phase_bar(ax, y, phases)
            continue
        prepare, wait = _seconds(rank.get("prepare_s")), _seconds(rank.get("liveness_wait_s"))
        ax.barh(y, prepare, color="tab:blue", label="preparation" if y == 0 else None)
        ax.barh(
            y, wait, left=prepare, color="tab:orange", label="liveness wait" if y == 0 else None
        )
    ax.set_yticks(
        range(len(ranks)), [f"{mode} rank {r.get('rank')}" for mode, r in ranks], fontsize=7
    )
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    if ax.get_legend_handles_labels()[1]:
        ax.legend(loc="lower right", fontsize=7)
    return _save(plt, fig, path)


def _phase_bar(ax: Any, y: int, phases: Mapping[str, Any]) -> None:
    times = {name: _seconds(value) for name, value in phases.items()}
    ax.barh(y, max(times.values(), default=0.0), color="tab:blue", alpha=0.3)
    for name, seconds in sorted(times.items(), key=lambda item: item[1]):
        ax.plot(seconds, y, "|", markersize=12, color="black")
        ax.annotate(
            name, (seconds, y), fontsize=6, rotation=30, xytext=(2, 4), textcoords="offset points"
        )


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path
