"""Stage events: the flow says when a stage starts, progresses and finishes; observers listen.

The flow knows nothing of terminals: it reports to a `StageObserver` and keeps its own stage
times and statuses in a `StageClock` (its outcome comes from the flow, never from a view). Three
observers exist: `NullObserver` (silence), `PrefectLogObserver` (one run-log line per event, for
runs without a terminal, e.g. a deployment on a server) and the rich terminal board in
`flows.ui.board`. A command hands its observer to the flow through `current_observer`, because
a Prefect flow takes only plain parameters. The observer's protocol and the stage names live in
`flows.stages`, below both the flow and the ui.
"""

from __future__ import annotations

import logging
import time
from contextvars import ContextVar

from flows.stages import StageObserver


class NullObserver:
    """An observer that ignores every event."""

    def started(self, stage: str) -> None:
        """Ignored."""

    def progressed(self, what: str, done: int, total: int) -> None:
        """Ignored."""

    def note(self, line: str) -> None:
        """Ignored."""

    def finished(self, stage: str, status: str, detail: str = "") -> None:
        """Ignored."""

    def waiting(self, prompt: str) -> None:
        """Ignored."""


class PrefectLogObserver:
    """Every transition and note as one line in the Prefect run log (no per-step progress).

    The run's logger is taken when the observer is made (inside the flow), so lines said from
    worker threads (a parallel install) still reach the run; outside a run, a plain logger.
    With `api_only` the lines go to the run's log on the server but not to this terminal (a
    board already shows them there).
    """

    def __init__(self, *, api_only: bool = False) -> None:
        from prefect import get_run_logger  # noqa: PLC0415 - Prefect only where a run is
        from prefect.exceptions import MissingContextError  # noqa: PLC0415

        from flows.pipeline.artifacts import ProgressArtifacts  # noqa: PLC0415

        self._progress = ProgressArtifacts()
        try:
            run_logger = get_run_logger()
        except MissingContextError:
            self._logger: logging.Logger | logging.LoggerAdapter[logging.Logger] = (
                logging.getLogger("sparkgate")
            )
            return
        self._logger = run_logger
        if api_only and isinstance(run_logger, logging.LoggerAdapter):
            self._logger = logging.LoggerAdapter(_api_only_logger(), run_logger.extra)

    def started(self, stage: str) -> None:
        """Log `<stage>: running`."""
        self.note(f"{stage}: running")

    def progressed(self, what: str, done: int, total: int) -> None:
        """Not logged (the notes say what happens): a progress artifact moves instead."""
        self._progress.update(what, done, total)

    def note(self, line: str) -> None:
        """Log the line at INFO."""
        self._logger.info(line)

    def finished(self, stage: str, status: str, detail: str = "") -> None:
        """Log `<stage>: <status> - <detail>`."""
        self.note(f"{stage}: {status}" + (f" - {detail}" if detail else ""))

    def waiting(self, prompt: str) -> None:
        """Log the prompt at INFO (the run's log in the UI shows how to answer)."""
        self.note(prompt)


def _api_only_logger() -> logging.Logger:
    """A logger whose lines reach the Prefect API (the run's log) and nothing else."""
    from prefect.logging.handlers import APILogHandler  # noqa: PLC0415

    logger = logging.getLogger("sparkgate.run_log")
    if not any(isinstance(handler, APILogHandler) for handler in logger.handlers):
        logger.addHandler(APILogHandler())
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


class Tee:
    """Every event to each of several observers (the terminal board and the run log)."""

    def __init__(self, *observers: StageObserver) -> None:
        self.observers = observers

    def started(self, stage: str) -> None:
        """Forwarded to each."""
        for observer in self.observers:
            observer.started(stage)

    def progressed(self, what: str, done: int, total: int) -> None:
        """Forwarded to each."""
        for observer in self.observers:
            observer.progressed(what, done, total)

    def note(self, line: str) -> None:
        """Forwarded to each."""
        for observer in self.observers:
            observer.note(line)

    def finished(self, stage: str, status: str, detail: str = "") -> None:
        """Forwarded to each."""
        for observer in self.observers:
            observer.finished(stage, status, detail)

    def waiting(self, prompt: str) -> None:
        """Forwarded to each."""
        for observer in self.observers:
            observer.waiting(prompt)


class Forwarder:
    """An observer in front of another: each event it does not handle itself goes on as is."""

    def __init__(self, observer: StageObserver) -> None:
        self.observer = observer

    def started(self, stage: str) -> None:
        """Forwarded."""
        self.observer.started(stage)

    def progressed(self, what: str, done: int, total: int) -> None:
        """Forwarded."""
        self.observer.progressed(what, done, total)

    def note(self, line: str) -> None:
        """Forwarded."""
        self.observer.note(line)

    def finished(self, stage: str, status: str, detail: str = "") -> None:
        """Forwarded."""
        self.observer.finished(stage, status, detail)

    def waiting(self, prompt: str) -> None:
        """Forwarded."""
        self.observer.waiting(prompt)


class StageClock(Forwarder):
    """The flow's own record of its stages (status, seconds), forwarding each event."""

    def __init__(self, observer: StageObserver) -> None:
        super().__init__(observer)
        self._started: dict[str, float] = {}
        self._seconds: dict[str, float] = {}
        self._statuses: dict[str, str] = {}

    def started(self, stage: str) -> None:
        """Start timing a stage."""
        self._started[stage] = time.monotonic()
        super().started(stage)

    def finished(self, stage: str, status: str, detail: str = "") -> None:
        """Stop timing a stage and keep its status (one never started is not timed)."""
        began = self._started.pop(stage, None)
        if began is not None:
            self._seconds[stage] = time.monotonic() - began
            self._statuses[stage] = status
        super().finished(stage, status, detail)

    def seconds(self) -> dict[str, float]:
        """Elapsed seconds of every timed stage, in the order they finished."""
        return dict(self._seconds)

    def statuses(self) -> dict[str, str]:
        """Status of every timed stage."""
        return dict(self._statuses)


current_observer: ContextVar[StageObserver | None] = ContextVar("current_observer", default=None)
"""The observer of the command that runs the flow (None: the Prefect run log)."""


def observer_of_run() -> StageObserver:
    """The run log, and the observer the running command set (its terminal board) beside it.

    One source, two sinks: what the terminal shows is also in the run's log on the server.
    """
    command = current_observer.get()
    if command is None:
        return PrefectLogObserver()
    return Tee(command, PrefectLogObserver(api_only=True))


def tell_run_log(line: str) -> None:
    """`line` in the run's log only: the terminal (if any) says it its own way.

    For an ending the flow returns as its final state: when Prefect's own orchestration ended
    the run first (a pause that expired), the returned state is refused, and the run's log is
    the one place on the server that still names the reason.
    """
    PrefectLogObserver(api_only=current_observer.get() is not None).note(line)
