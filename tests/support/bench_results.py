"""A passing benchmark GateResult from a session run in a test, with the raw files it wrote.

Record tests that recompute a benchmark need what the gate would save: the arms (and ledger)
under the stage folder and a summary built from the session by the gate's own code.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from flows.gates.base import GateResult, Outcome
from flows.gates.benchmark.rules import Session, points_summary
from flows.gates.benchmark.summary import BenchmarkSummary


def passed_benchmark(session: Session, out: Path, pattern: str) -> GateResult:
    """The gate's passing result of `session`, listing the files under `out` matching `pattern`."""
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob(pattern))
    return GateResult(
        gate="benchmark", outcome=Outcome.PASSED, reason="faster",
        started_at=datetime.now(UTC), seconds=1.0, files=files,
        summary=BenchmarkSummary(arms=list(session.roles), tolerance=0.03,
                                 decision=session.decision.value,
                                 ledger_gaps=session.comparison.ledger_gaps,
                                 points=points_summary(session)),
    )  # fmt: skip
