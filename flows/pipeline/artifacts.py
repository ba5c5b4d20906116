"""What a reviewer sees in Prefect's UI beside the run log: the record, the points, progress.

The record's README becomes a markdown artifact, the benchmark's points a table artifact
(previous, candidate, change, interval, verdict, whether the row gates), and a long stage a
progress artifact that moves while arms run. The README links its plots by relative path (right
on disk, broken in a browser that has only the server), so the artifact's copy carries each plot
inline as a `data:image/...;base64` URI, which Prefect 3.9's UI lets through its markdown
sanitiser for images (the browser test checks every plot loads). The rows and the rewriting are
pure; the `publish_*` calls are the only Prefect I/O, and they do nothing outside a run.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any
from uuid import UUID

from flows.gates.benchmark.story import bench_headline, bench_outcome
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


def benchmark_description(release: str, summary: BenchmarkSummary) -> str:
    """The table artifact's description: what the benchmark found (faster, level, slower,
    inconclusive), then the one benchmark headline the CLI prints too."""
    return (
        f"{release}: benchmark {bench_outcome(summary)} ({summary.decision} after "
        f"{len(summary.arms)} arms); {bench_headline(summary)}"
    )


# ![alt](path) or ![alt](path "title"); the path has no spaces (the record writes plots/x.png)
_IMAGE = re.compile(r'!\[(?P<alt>[^\]]*)\]\((?P<path>[^)\s]+)(?P<title>\s+"[^"]*")?\)')
_MEDIA_TYPES = {
    ".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
    ".gif": "image/gif", ".webp": "image/webp",
}  # fmt: skip


def relative_image(path: str) -> bool:
    """Whether an image link names a file beside the document (not a URL, not absolute, no `..`)."""
    if ":" in path or path.startswith(("/", "#")):
        return False
    parts = PurePosixPath(path).parts
    return bool(parts) and ".." not in parts and PurePosixPath(path).suffix.lower() in _MEDIA_TYPES


def embed_images(markdown: str, load: Callable[[str], bytes | None]) -> str:
    """`markdown` with every relative image link replaced by a data URI of `load(path)`.

    A link whose file `load` cannot give (None) stays as it was, so a missing plot shows as the
    same broken link it is on disk rather than vanishing.
    """

    def inline(match: re.Match[str]) -> str:
        path = match["path"]
        if not relative_image(path):
            return match[0]
        data = load(path)
        if data is None:
            return match[0]
        media = _MEDIA_TYPES[PurePosixPath(path).suffix.lower()]
        uri = f"data:{media};base64,{base64.b64encode(data).decode('ascii')}"
        return f"![{match['alt']}]({uri}{match['title'] or ''})"

    return _IMAGE.sub(inline, markdown)


def file_loader(folder: Path) -> Callable[[str], bytes | None]:
    """Read a relative path inside `folder`; None when it is missing or leads outside."""
    root = folder.resolve()

    def load(path: str) -> bytes | None:
        target = (root / path).resolve()
        if not target.is_relative_to(root) or not target.is_file():
            return None
        return target.read_bytes()

    return load


def _in_a_run() -> bool:
    from prefect.context import FlowRunContext, TaskRunContext  # noqa: PLC0415

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


def publish_record(release: str, published: Path) -> None:
    """The record's README as a markdown artifact of the run, its plots inline."""
    from prefect.artifacts import create_markdown_artifact  # noqa: PLC0415

    readme = published / "README.md"
    if readme.is_file() and _in_a_run():
        create_markdown_artifact(
            embed_images(readme.read_text(), file_loader(published)),
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
            description=benchmark_description(release, summary),
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
