"""A failed gate is one line in the run log: the state dump with "NoneType: None" is dropped."""

from __future__ import annotations

import logging

import pytest

from flows.pipeline.quiet_logs import DropStateDumps, quiet_failed_states


def test_the_state_dump_is_dropped_and_the_one_line_verdict_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    quiet_failed_states()
    quiet_failed_states()  # once is enough, twice does no harm
    logger = logging.getLogger("prefect.task_runs")
    assert sum(isinstance(f, DropStateDumps) for f in logger.filters) == 1
    with caplog.at_level(logging.INFO, logger="prefect.task_runs"):
        logger.error("Task run failed with state: Failed(message='x', result=%s)", "1" * 3000,
                     exc_info=True)  # fmt: skip
        logger.error("Finished in state Failed('benchmark: slower beyond 3%')")
    assert [r.getMessage() for r in caplog.records] == [
        "Finished in state Failed('benchmark: slower beyond 3%')"
    ]
