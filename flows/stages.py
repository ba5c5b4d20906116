"""The qualification's stages and the events a flow reports about them, shared by both sides.

The pipeline runs the stages and reports each transition to a `StageObserver`; the terminal board
(`flows.ui.board`) is one such observer and shows the stages by these names and titles. Both
import them from here, so the view never reaches into the flow that it watches.
"""

from __future__ import annotations

from typing import Protocol

from flows.gates.registry import GATES, REGISTRY

STAGES = ("validate", "lock", "preflight", "build", "distribute", *GATES, "verdict", "record")
"""Every stage of a qualification, in the order it runs."""

CALIBRATION_STAGES = ("lock", "preflight", "build", "distribute", "calibration", "record")
"""Every stage of an A/A calibration (`sparkgate calibrate`), in the order it runs."""

STAGE_TITLES = {
    "validate": "load + validate",
    "lock": "cluster lock",
    "preflight": "preflight",
    "build": "build once",
    "distribute": "distribute + verify",
    **{gate.name: gate.title for gate in REGISTRY},
    "calibration": "A/A calibration",
    "verdict": "verdict",
    "record": "record",
}
"""What a person reads for each stage."""


class StageObserver(Protocol):
    """Receives the flow's stage events; statuses are passed, cached, skipped or failed."""

    def started(self, stage: str) -> None:
        """A stage began."""

    def progressed(self, what: str, done: int, total: int) -> None:
        """Progress inside the running stage: what is counted, how many done, of how many."""

    def note(self, line: str) -> None:
        """One progress line (a `LineSink`)."""

    def finished(self, stage: str, status: str, detail: str = "") -> None:
        """A stage ended with a status and a one-line detail."""

    def waiting(self, prompt: str) -> None:
        """The run waits for a person; `prompt` (lines) says how to answer. A terminal keeps it
        last on screen until the next event."""
