"""What a reviewer sees in Prefect's UI beside the run log: the record, the points, progress.

The record's README becomes a markdown artifact, the benchmark's points a table artifact
(previous, candidate, change, interval, verdict, whether the row gates), and a long stage a
progress artifact that moves while arms run. The rows are pure; the `publish_*` calls are the
only Prefect I/O, and they do nothing outside a run.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any
from uuid import UUID

from flows.gates.benchmark.summary import BenchmarkSummary


def artifact_key(*parts: str) -> str:
    """A key Prefect accepts: lowercase letters, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")


def _number(value: float | None, decimals: int = 4) -> str:
    return "-" if value is None else f"{value:.{decimals}g}"


def benchmark_rows(summary: BenchmarkSummary) -> list[dict[str, Any]]:
    """One row per point and metric: levels, change with its interval, verdict, gating."""
    return [
        {
            "point": row.point,
            "metric": row.unit,
            "previous": _number(row.previous),
            "candidate": _number(row.candidate),
            "change %": "-" if row.change is None else f"{row.change:+.2f}",
            "95% interval %": (
                "-" if row.low is None or row.high is None else f"[{row.low:+.2f}, {row.high:+.2f}]"
            ),
            "verdict": row.verdict,
            "gates": "yes" if row.gated else "reported",
        }
        for row in summary.points
    ]


def _in_a_run() -> bool:
    from prefect.context import FlowRunContext, TaskRunContext  # noqa: PLC0415

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


def publish_record(release: str, published: Path) -> None:
    """The record's README as a markdown artifact of the run."""
    from prefect.artifacts import create_markdown_artifact  # noqa: PLC0415

    readme = published / "README.md"
    if readme.is_file() and _in_a_run():
        create_markdown_artifact(
            readme.read_text(),
            key=artifact_key("record", release),
            description=f"record of {release}",
        )


def publish_benchmark(release: str, summary: BenchmarkSummary) -> None:
    """The benchmark's points as a table artifact of the run."""
    from prefect.artifacts import create_table_artifact  # noqa: PLC0415

    if summary.points and _in_a_run():
        create_table_artifact(
            benchmark_rows(summary),
            key=artifact_key("benchmark", release),
            description=(
                f"{release}: {summary.decision} after {len(summary.arms)} arms "
                f"({', '.join(summary.arms)})"
            ),
        )


class ProgressArtifacts:
    """A progress artifact per counted thing (e.g. `arm 2 samples`), updated at most every few s."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s = every_s
        self._ids: dict[str, UUID] = {}
        self._last: dict[str, float] = {}

    def update(self, what: str, done: int, total: int) -> None:
        """Create or move the artifact of `what` (nothing outside a run)."""
        from prefect.artifacts import (  # noqa: PLC0415
            create_progress_artifact,
            update_progress_artifact,
        )

        if total <= 0 or not _in_a_run():
            return
        now = time.monotonic()
        percent = min(100.0, 100.0 * done / total)
        if what not in self._ids:
            made = create_progress_artifact(
                percent, key=artifact_key("progress", what), description=what
            )
            if not isinstance(made, UUID):  # called from a sync context: always a UUID
                return
            self._ids[what] = made
        elif done >= total or now - self._last.get(what, 0.0) >= self.every_s:
            update_progress_artifact(self._ids[what], percent)
        else:
            return
        self._last[what] = now
