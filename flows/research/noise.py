"""Each point's noise over a series of real sessions: which points are steady enough to gate.

`sparkgate bench variance` splits one session's noise; one session has a handful of arms, so its
arm-level SD is a guess (a few df). A series of sessions of a release against itself (`python -m
flows.research.sessions RELEASE --previous RELEASE --out DIR`) holds tens of such guesses
per point. This decomposes every session of the series for one metric and prints, per point,
the median and the largest arm-means SD (what limits a decision across arms) and the median
within-arm SD, so a suite can gate the points that can decide and report the others.

    python -m flows.research.noise .sparkgate/sessions-aa/r1-vs-r1-* [--metric engine_cpu_ms]
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from rich.table import Table

from flows.bench.variance import Components, decompose_all
from flows.research.shifted import read_session, session_folders
from flows.ui.console import out_console


class PointNoise(BaseModel):
    """One point's noise over a series: percent SDs of one arm's mean, summarised."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    point: str = Field(description="point name")
    sessions: int = Field(description="sessions whose arms left an arm-level SD (df >= 1)")
    arm_sd_median_pct: float = Field(description="median over sessions of the arm-means SD")
    arm_sd_max_pct: float = Field(description="largest arm-means SD of a session")
    within_sd_median_pct: float = Field(description="median over sessions of the within-arm SD")


def summarise(per_session: Iterable[Sequence[Components]], metric: str) -> list[PointNoise]:
    """Pool the sessions' decompositions of `metric` point by point (pure)."""
    arm_sds: dict[str, list[float]] = defaultdict(list)
    within_sds: dict[str, list[float]] = defaultdict(list)
    for rows in per_session:
        for row in rows:
            if row.metric == metric and row.arm_sd_pct is not None:
                arm_sds[row.point].append(row.arm_sd_pct)
                within_sds[row.point].append(row.within_sd_pct)
    return [
        PointNoise(
            point=point,
            sessions=len(sds),
            arm_sd_median_pct=statistics.median(sds),
            arm_sd_max_pct=max(sds),
            within_sd_median_pct=statistics.median(within_sds[point]),
        )
        for point, sds in sorted(arm_sds.items())
    ]


def session_components(folder: Path) -> list[Components]:
    """One recorded session's noise per point and metric, its arms in the order run."""
    arms, _ = read_session(folder)
    return decompose_all([arm for _, arm in arms], [role == "candidate" for role, _ in arms])


def _table(rows: Sequence[PointNoise], metric: str) -> Table:
    table = Table(title=f"{metric}: SD of one arm's mean over sessions, %")
    for header in ("point", "sessions", "arm means, median", "arm means, max", "within, median"):
        table.add_column(header)
    for row in sorted(rows, key=lambda r: r.arm_sd_median_pct):
        table.add_row(
            row.point, str(row.sessions), f"{row.arm_sd_median_pct:.2f}",
            f"{row.arm_sd_max_pct:.2f}", f"{row.within_sd_median_pct:.2f}",
        )  # fmt: skip
    return table


def main(argv: list[str] | None = None) -> int:
    """Summarise the noise of every session folder under the given ones; print the table."""
    parser = argparse.ArgumentParser(prog="python -m flows.research.noise")
    parser.add_argument("sessions", type=Path, nargs="+", help="folders of session-N folders")
    parser.add_argument("--metric", default="engine_cpu_ms", help="the metric to summarise")
    args = parser.parse_args(argv)
    folders = session_folders(args.sessions)
    rows = summarise((session_components(folder) for folder in folders), args.metric)
    if not rows:
        raise SystemExit(f"no session measured {args.metric} in two arms of a role")
    out_console.print(_table(rows, args.metric))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
