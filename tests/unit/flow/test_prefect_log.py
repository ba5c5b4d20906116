"""Prefect's own console lines: none from a run's log and no INFO unless -v; warnings stay."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from prefect.logging.handlers import PrefectConsoleHandler
from rich.console import Console

from flows.ui.prefect_log import show_prefect_log


@pytest.fixture
def console_handler() -> Iterator[PrefectConsoleHandler]:
    """A Prefect console handler on a logger of its own (as Prefect's logging config puts one
    on the root logger; pytest's own logging setup may stand in for that one here)."""
    handler = PrefectConsoleHandler()
    logger = logging.getLogger("tests.prefect_console")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def _printed(handler: PrefectConsoleHandler, name: str, level: int, message: str) -> str:
    record = logging.LogRecord(name, level, __file__, 1, message, None, None)
    record.flow_run_name, record.task_run_name = "crazy-fox", "gate-1"
    handler.handle(record)
    return str(handler.console.file.getvalue())  # type: ignore[attr-defined]


def test_without_verbose_run_lines_are_dropped_and_warnings_kept(
    console_handler: PrefectConsoleHandler,
) -> None:
    show_prefect_log(Console(file=io.StringIO(), width=200), verbose=False)
    begun = "Beginning flow run 'crazy-fox' for flow 'qualify-release'"
    assert _printed(console_handler, "prefect.flow_runs", logging.INFO, begun) == ""
    failed = "Finished in state Failed('r1 rejected by bob: not today')"
    assert _printed(console_handler, "prefect.flow_runs", logging.ERROR, failed) == ""
    assert _printed(console_handler, "prefect.client", logging.INFO, "connected") == ""
    shown = _printed(console_handler, "prefect.client", logging.WARNING, "API not responding")
    assert "API not responding" in shown


def test_verbose_shows_prefects_own_lines_on_our_console(
    console_handler: PrefectConsoleHandler,
) -> None:
    show_prefect_log(Console(file=io.StringIO(), width=200), verbose=False)
    show_prefect_log(Console(file=io.StringIO(), width=200), verbose=True)  # -v undoes it
    begun = "Beginning flow run 'crazy-fox' for flow 'qualify-release'"
    assert begun in _printed(console_handler, "prefect.flow_runs", logging.INFO, begun)
