"""Prefect's own console lines: quiet unless asked for with `-v`.

Prefect prints every run event to the terminal ("Beginning flow run 'crazy-fox'", "Finished in
state Completed()", a traceback for an expected refusal), with random run names, between the
lines of the board that already shows each stage, and its "Finished in state Failed(...)" says a
verdict the command says again. So by default the console shows none of the run loggers' lines
and only warnings from the rest of Prefect (a server that does not answer); the run's whole log
is still sent to the Prefect server (its UI shows it). With `verbose` everything Prefect prints
comes back. Either way its lines go to our console, so they scroll above a live board instead of
garbling it.
"""

from __future__ import annotations

import logging

from rich.console import Console

RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")
"""The loggers of flow and task runs: their lines carry the random run names."""


class QuietPrefect(logging.Filter):
    """Keeps only warnings and worse, and nothing from the run loggers."""

    def filter(self, record: logging.LogRecord) -> bool:
        """True for a warning from outside a run's log, False for everything else."""
        return record.levelno >= logging.WARNING and not record.name.startswith(RUN_LOGGERS)


def show_prefect_log(console: Console, *, verbose: bool) -> None:
    """Point Prefect's console handlers at `console`, quiet (see the module) unless `verbose`.

    Import after `flows.settings.prefect_environment()` (this imports Prefect, whose import sets
    up its handlers).
    """
    from prefect.logging.handlers import PrefectConsoleHandler  # noqa: PLC0415

    loggers = [logging.getLogger(), *[
        logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
    ]]  # fmt: skip
    for logger in loggers:
        for handler in logger.handlers:
            if not isinstance(handler, PrefectConsoleHandler):
                continue
            handler.console = console
            for existing in [f for f in handler.filters if isinstance(f, QuietPrefect)]:
                handler.removeFilter(existing)
            if not verbose:
                handler.addFilter(QuietPrefect())
