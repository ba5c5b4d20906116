"""One line per failed gate in the run log: Prefect's state dump is dropped.

A gate that fails returns a Failed state (a verdict, not a crash). Prefect then logs "Task run
failed with state: Failed(..., result=GateResult(...))" at ERROR with `exc_info` though nothing
was raised: a few kilobytes of repr and a "NoneType: None" line. The "Finished in state
Failed('<gate>: <reason>')" line that follows already says it in one line, so the dump is
filtered out of the task-run logger.
"""

from __future__ import annotations

import logging

STATE_DUMP = "Task run failed with state: "


class DropStateDumps(logging.Filter):
    """Refuses the records that dump a returned Failed state."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a state dump, True for everything else."""
        return not str(record.msg).startswith(STATE_DUMP)


def quiet_failed_states() -> None:
    """Install the filter on Prefect's task-run logger (once; safe to call again)."""
    logger = logging.getLogger("prefect.task_runs")
    if not any(isinstance(existing, DropStateDumps) for existing in logger.filters):
        logger.addFilter(DropStateDumps())
