"""The benchmark of an irreversible host change (I/O): the candidate's arms on the changed hosts,
compared with the previous release's arms of its newest record on this shape by the
cross-session rule (`cross_rules`).

The recorded arms are copied into this stage (`arms/recorded-<k>-previous/arm.json`) so the
record stands on its own and `verify` recomputes the comparison from its own files. The session
runs the candidate's arms of the release's first session (its `candidate` entries), then, while
undecided, one more candidate arm at a time up to `max_arms`: more arms narrow the boot-noise
part of the interval, never the stated allowance.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from flows.bench.compare import Comparison, SessionDecision, session_decision
from flows.bench.ledger import Ledger
from flows.bench.report import ArmReport, read_arm
from flows.gates.base import RecordedArms
from flows.gates.benchmark.cross_rules import CrossSession, compare_across_sessions
from flows.gates.benchmark.rules import Focus, Role, Session, session_looks
from flows.gates.files import GateFiles
from flows.spec.release import BenchmarkGate

MeasureCandidate = Callable[[int, Focus], ArmReport]


def keep_recorded(recorded: RecordedArms, files: GateFiles) -> list[tuple[str, ArmReport]]:
    """Copy the recorded arms into this stage; (folder under arms/, report) of each."""
    kept = []
    for k, folder in enumerate(recorded.folders, 1):
        name = f"recorded-{k}-previous"
        files.write_text(f"arms/{name}/arm.json", (folder / "arm.json").read_text())
        kept.append((name, read_arm(files.root / "arms" / name)))
    return kept


def read_recorded(stage_dir: Path, cross: CrossSession) -> list[ArmReport]:
    """The recorded arms a cross-session comparison used, as this stage keeps them."""
    return [read_arm(stage_dir / "arms" / name) for name in cross.recorded_arms]


def run_cross_session(
    settings: BenchmarkGate,
    recorded: RecordedArms,
    files: GateFiles,
    *,
    ledger: Ledger | None,
    measure: MeasureCandidate,
    may_add: Callable[[], bool],
    on_compare: Callable[[Comparison, SessionDecision, int], None],
) -> tuple[Session, CrossSession]:
    """Candidate arms until decided; the session (recorded arms as its `previous`) and what the
    record states of the rule."""
    allowance = settings.cross_session_allowance_pct
    if allowance is None:  # the release's validation requires it with an irreversible layer
        raise ValueError("an irreversible host change needs cross_session_allowance_pct")
    kept = keep_recorded(recorded, files)
    cross = CrossSession(
        allowance_pct=allowance, record=recorded.record, recorded_arms=[name for name, _ in kept]
    )
    old = [report for _, report in kept]
    first = settings.arms.count("candidate")
    looks = cross_looks(settings)
    reports = [measure(i, None) for i in range(1, first + 1)]
    while True:
        comparison = compare(reports, old, cross, ledger, settings, looks)
        decision = session_decision(comparison, len(reports), settings.max_arms)
        on_compare(comparison, decision, len(reports))
        adding = decision in (SessionDecision.ADD_PREVIOUS, SessionDecision.ADD_CANDIDATE)
        if adding and not may_add():
            decision, adding = SessionDecision.FAIL_INCONCLUSIVE, False
        if not adding:
            return as_session(reports, old, comparison, decision), cross
        focus = frozenset(row.point for row in comparison.inconclusive)
        reports.append(measure(len(reports) + 1, focus))


def cross_looks(settings: BenchmarkGate) -> int:
    """How many times a cross-session session may compare: after its first candidate arms,
    then after each added one."""
    return session_looks(settings.arms.count("candidate"), settings.max_arms)


def compare(  # noqa: PLR0917 - the arms and everything the rule is applied with
    new: list[ArmReport],
    old: list[ArmReport],
    cross: CrossSession,
    ledger: Ledger | None,
    settings: BenchmarkGate,
    looks: int,
) -> Comparison:
    """The cross-session comparison at the release's tolerance and gate policy."""
    return compare_across_sessions(
        new, old, allowance_pct=cross.allowance_pct, ledger=ledger,
        tolerance_pct=settings.tolerance * 100, policy=settings.policy(), looks=looks,
    )  # fmt: skip


def as_session(
    new: list[ArmReport], old: list[ArmReport], comparison: Comparison, decision: SessionDecision
) -> Session:
    """The session as the summary reads it: today's arms, then the recorded ones as previous."""
    candidate: Role = "candidate"
    previous: Role = "previous"
    roles = [candidate] * len(new) + [previous] * len(old)
    return Session(roles, [*new, *old], comparison, decision)
