"""How builds and transfers report progress, kept apart from how progress is drawn.

The build and distribution code only calls an `ImageProgress` observer; `NullProgress` ignores
everything (tests, Prefect tasks that log instead), `RichImageProgress` draws bars with rich.
"""

from __future__ import annotations

import re
import threading
from types import TracebackType
from typing import Protocol

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from flows.lines import LineSink, silent

_STEP = re.compile(r"^Step (?P<step>\d+)/(?P<total>\d+) : (?P<text>.*)$")


class ImageProgress(Protocol):
    """Callbacks from a build and from each node's transfer (may come from several threads)."""

    def build_step(self, step: int, total: int, instruction: str) -> None:
        """The builder started Dockerfile step `step` of `total`."""

    def build_output(self, line: str) -> None:
        """One line of builder output."""

    def build_done(self, ok: bool) -> None:
        """The build ended, successfully or not."""

    def transfer_start(self, node: str, total_bytes: int) -> None:
        """Sending the image to `node` began; total_bytes is an estimate."""

    def transfer_advance(self, node: str, sent_bytes: int) -> None:
        """sent_bytes more went to `node`."""

    def transfer_done(self, node: str, ok: bool) -> None:
        """The transfer to `node` ended, successfully or not."""


def parse_step(line: str) -> tuple[int, int, str] | None:
    """`Step 3/9 : RUN x` -> (3, 9, "RUN x"); None for other builder output."""
    match = _STEP.match(line.strip())
    if match is None:
        return None
    return int(match["step"]), int(match["total"]), match["text"]


class NullProgress:
    """An observer that ignores everything."""

    def build_step(self, step: int, total: int, instruction: str) -> None:
        """Ignored."""

    def build_output(self, line: str) -> None:
        """Ignored."""

    def build_done(self, ok: bool) -> None:
        """Ignored."""

    def transfer_start(self, node: str, total_bytes: int) -> None:
        """Ignored."""

    def transfer_advance(self, node: str, sent_bytes: int) -> None:
        """Ignored."""

    def transfer_done(self, node: str, ok: bool) -> None:
        """Ignored."""


class RichImageProgress:
    """Bars on a rich console: one for the build's steps, one per node for its transfer."""

    def __init__(self, console: Console) -> None:
        self._lock = threading.Lock()
        self._progress = Progress(
            TextColumn("{task.description:<16}"),
            BarColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self._build: TaskID | None = None
        self._nodes: dict[str, TaskID] = {}

    def __enter__(self) -> RichImageProgress:
        self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._progress.stop()

    def build_step(self, step: int, total: int, instruction: str) -> None:
        """Advance the build bar to the step that just started."""
        with self._lock:
            detail = f"step {step}/{total}: {instruction[:48]}"
            if self._build is None:
                self._build = self._progress.add_task("build", total=total, detail=detail)
            self._progress.update(self._build, completed=step - 1, detail=detail)

    def build_output(self, line: str) -> None:
        """Builder lines are not drawn; the step bar says where the build is."""

    def build_done(self, ok: bool) -> None:
        """Fill the build bar and label it with the outcome."""
        with self._lock:
            if self._build is None:
                self._build = self._progress.add_task("build", total=1, detail="")
            task = self._progress.tasks[self._build]
            done = task.total if ok else task.completed
            self._progress.update(self._build, completed=done, detail="built" if ok else "FAILED")

    def transfer_start(self, node: str, total_bytes: int) -> None:
        """Add a bar for node."""
        with self._lock:
            self._nodes[node] = self._progress.add_task(
                f"send {node}", total=total_bytes or None, detail=_megabytes(0, total_bytes)
            )

    def transfer_advance(self, node: str, sent_bytes: int) -> None:
        """Advance node's bar."""
        with self._lock:
            task = self._nodes[node]
            self._progress.advance(task, sent_bytes)
            sent = int(self._progress.tasks[task].completed)
            total = int(self._progress.tasks[task].total or 0)
            self._progress.update(task, detail=_megabytes(sent, total))

    def transfer_done(self, node: str, ok: bool) -> None:
        """Complete node's bar, labelled with the outcome."""
        with self._lock:
            task = self._nodes[node]
            sent = self._progress.tasks[task].completed
            status = "loaded" if ok else "FAILED"
            self._progress.update(
                task, description=f"{status} {node}", total=max(sent, 1), completed=max(sent, 1)
            )


def _megabytes(sent: int, total: int) -> str:
    """`12.3/635.3 MB` (the image size is an estimate of what `docker save` sends)."""
    return f"{sent / 1e6:.1f}/{total / 1e6:.1f} MB" if total else f"{sent / 1e6:.1f} MB"


class LineProgress:
    """An ImageProgress that reports build steps and transfers as plain lines."""

    def __init__(self, say: LineSink = silent) -> None:
        self._say = say

    def build_step(self, step: int, total: int, instruction: str) -> None:
        """One line per Dockerfile step."""
        self._say(f"image build step {step}/{total}: {instruction[:80]}")

    def build_output(self, line: str) -> None:
        """Builder output is not repeated (the build error carries its tail)."""

    def build_done(self, ok: bool) -> None:
        """The build's end."""
        self._say("image built" if ok else "image build failed")

    def transfer_start(self, node: str, total_bytes: int) -> None:
        """A transfer begins."""
        self._say(f"{node}: loading the image (about {total_bytes / 1e6:.0f} MB)")

    def transfer_advance(self, node: str, sent_bytes: int) -> None:
        """Progress within a transfer is not reported line by line."""

    def transfer_done(self, node: str, ok: bool) -> None:
        """A transfer's end."""
        self._say(f"{node}: image {'loaded' if ok else 'transfer failed'}")
