"""How `sparkgate qualify` reads the flow's final state: a verdict, or an error to exit with."""

from __future__ import annotations

import pytest
from prefect.states import Completed, Failed

from flows.commands.qualify import _outcome
from flows.errors import GateFailedError, LockHeldError
from flows.pipeline.qualify import QualifyOutcome

OUTCOME = QualifyOutcome(
    release="r2", verdict="failed at benchmark: slower", failed_gate="benchmark",
    record="experiments/2026-12-02-r2", gates={"benchmark": "failed"},
    stages={"benchmark": "failed"}, seconds={"benchmark": 12.5},
)  # fmt: skip


def test_a_failed_gate_still_gives_the_outcome_for_the_summary() -> None:
    state = Failed(message="r2 failed at benchmark", data=OUTCOME)
    assert _outcome("r2", state) == OUTCOME


def test_a_passing_run_gives_its_outcome() -> None:
    passed = OUTCOME.model_copy(update={"verdict": "qualified", "failed_gate": None})
    assert _outcome("r2", Completed(data=passed)) == passed


def test_a_refusal_is_raised_as_itself() -> None:
    with pytest.raises(LockHeldError, match="held by"):
        _outcome("r2", Failed(data=LockHeldError("cluster local is held by alice")))


def test_a_crash_is_raised_as_a_failed_qualification_naming_the_release() -> None:
    with pytest.raises(GateFailedError, match="r2: qualification failed: boom"):
        _outcome("r2", Failed(data=RuntimeError("boom")))
