"""Real A/A sessions replayed with a known slowdown: the gate's power on this machine's own noise.

`sessions_mc` draws Gaussian noise; real arms are heavy-tailed and drift. Running a slower
release for real costs minutes a session and its true effect is known only roughly
(docs/statistics.md has the figures). This takes the raw arms of
real sessions of a release against itself (`python -m flows.research.sessions RELEASE
--previous RELEASE --out DIR`), multiplies every candidate sample by the slowdown (times longer,
throughputs lower), and replays each session through the gate's own rules: the same first arms,
the same comparison, ledger and looks, an arm added while a gated point is undecided, measuring
only the undecided points. It prints, per slowdown, how the sessions would have ended and after
how many arms. With no slowdown it recomputes the real sessions' decisions.

    python -m flows.research.shifted releases/r1.yaml .sparkgate/sessions-aa/r1-vs-r1-*
        [--slowdown 0 0.05 0.10] [--report-only single streams]

`--report-only` replays the sessions as if their suite had said `gate: false` on those workloads
(their points compared and shown, not gating): how a gate policy would have decided the same arms.

A replay can only use the arms that were run: a session that would have needed more arms than
the real one took ends as inconclusive ("out of arms"), and an added arm lacks any point the real
session had already decided, which the comparison then estimates from the arms that have it.
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Collection, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from rich.table import Table

from flows.bench.compare import Comparison, compare_arms
from flows.bench.ledger import Ledger, read_ledger
from flows.bench.policy import suite_entries
from flows.bench.report import ArmReport, Sample, higher_is_better, read_arm
from flows.errors import BenchError
from flows.gates.benchmark.rules import (
    LEDGER_FILE,
    Focus,
    Role,
    focused_arm,
    run_session,
    session_looks,
)
from flows.spec.gate_policy import METRICS
from flows.spec.release import BenchmarkGate, load_release
from flows.ui.console import out_console

OUT_OF_ARMS = "out-of-arms"
# Times and throughputs move with a slowdown; draft acceptance and the metrics no gate reads
# (hit rates, lateness) are left as measured.
SPEEDS = frozenset(METRICS) - {"draft_acceptance_len"}


class Replayed(BaseModel):
    """How one session would have ended with the candidate slowed by `slowdown`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session: str = Field(description="the session's folder name")
    slowdown: float = Field(description="fraction multiplied into the candidate's times")
    decision: str = Field(description="the gate's decision, or out-of-arms")
    arms: int = Field(description="arms the decision used")
    slower_points: list[str] = Field(description="gated rows decided slower")


def slowed(report: ArmReport, slowdown: float) -> ArmReport:
    """The arm as if its release were `slowdown` slower: times up, throughputs down."""
    factor = 1.0 + slowdown

    def scaled(name: str, value: float) -> float:
        if name not in SPEEDS:
            return value
        return value / factor if higher_is_better(name) else value * factor

    def sample(kept: Sample) -> Sample:
        metrics = {name: scaled(name, value) for name, value in kept.metrics.items()}
        return kept.model_copy(update={"metrics": metrics})

    points = {
        name: point.model_copy(update={"samples": [sample(s) for s in point.samples]})
        for name, point in report.points.items()
    }
    return report.model_copy(update={"points": points})


def report_only(report: ArmReport, workloads: Collection[str]) -> ArmReport:
    """The arm as if its suite had said `gate: false` on the named workloads (an added arm runs
    only the undecided ones and may lack some)."""
    if not workloads:
        return report
    entries = report.workload.get("workloads")
    if not isinstance(entries, list):
        raise BenchError("the arm keeps no suite workloads to re-gate")
    regated = [
        {**entry, "gate": False} if isinstance(entry, dict) and entry.get("name") in workloads
        else entry
        for entry in entries
    ]  # fmt: skip
    return report.model_copy(update={"workload": {**report.workload, "workloads": regated}})


def replay(
    name: str,
    arms: Sequence[tuple[Role, ArmReport]],
    settings: BenchmarkGate,
    ledger: Ledger | None,
    slowdown: float,
    *,
    reported_only: Collection[str] = (),
) -> Replayed:
    """Run the gate's session over the recorded arms, the candidate's slowed by `slowdown`
    (and the workloads in `reported_only` not gating)."""
    looks = session_looks(len(settings.arms), settings.max_arms)
    first = list(settings.arms)
    if [role for role, _ in arms[: len(first)]] != first:
        raise BenchError(f"{name}: its first arms are not {', '.join(first)}")
    stored = [
        report_only(slowed(arm, slowdown) if role == "candidate" else arm, reported_only)
        for role, arm in arms
    ]

    measured: list[int] = []

    def measure(index: int, role: Role, focus: Focus) -> ArmReport:
        measured.append(index)
        if arms[index - 1][0] != role:
            raise BenchError(f"{name}: arm {index} was a {arms[index - 1][0]} arm, not {role}")
        return focused_arm(stored[index - 1], focus)

    def compare(new: list[ArmReport], old: list[ArmReport]) -> Comparison:
        return compare_arms(
            new, old, ledger=ledger, tolerance_pct=settings.tolerance * 100,
            policy=settings.policy(), looks=looks,
        )  # fmt: skip

    session = run_session(
        first, settings.max_arms, measure, compare, may_add=lambda: len(measured) < len(arms)
    )
    decision = OUT_OF_ARMS if session.stopped_early else session.decision.value
    return Replayed(
        session=name,
        slowdown=slowdown,
        decision=decision,
        arms=len(session.roles),
        slower_points=[f"{row.point} {row.metric}" for row in session.comparison.regressions],
    )


def read_session(folder: Path) -> tuple[list[tuple[Role, ArmReport]], Ledger | None]:
    """A recorded session's arms in the order run (`arms/<index>-<role>/`) and its ledger."""
    arms: list[tuple[int, Role, ArmReport]] = []
    for arm_dir in (folder / "arms").iterdir():
        index, _, role = arm_dir.name.partition("-")
        if role not in ("candidate", "previous") or not index.isdigit():
            raise BenchError(f"{arm_dir}: not an arm folder (<index>-candidate|previous)")
        arms.append((int(index), "candidate" if role == "candidate" else "previous",
                     read_arm(arm_dir)))  # fmt: skip
    ledger_file = folder / LEDGER_FILE
    ledger = read_ledger(ledger_file) if ledger_file.exists() else None
    return [(role, arm) for _, role, arm in sorted(arms, key=lambda a: a[0])], ledger


def session_folders(roots: Sequence[Path]) -> list[Path]:
    """The session-N folders under each root, in session order; exits when there are none."""
    folders = [
        folder
        for root in roots
        for folder in sorted(root.glob("session-*"), key=lambda f: int(f.name.split("-")[-1]))
    ]
    if not folders:
        raise SystemExit(f"no session-N folders under {', '.join(map(str, roots))}")
    return folders


def _table(rows: Sequence[Replayed]) -> Table:
    table = Table(title="replayed sessions, candidate slowed")
    for header in ("slowdown", "sessions", "decisions", "arms", "points called slower"):
        table.add_column(header)
    by_slowdown: dict[float, list[Replayed]] = collections.defaultdict(list)
    for row in rows:
        by_slowdown[row.slowdown].append(row)
    for slowdown, group in sorted(by_slowdown.items()):
        decisions = collections.Counter(row.decision for row in group)
        arms = collections.Counter(row.arms for row in group)
        points = collections.Counter(p.split()[0] for row in group for p in row.slower_points)
        table.add_row(
            f"{100 * slowdown:+.0f} %",
            str(len(group)),
            ", ".join(f"{k} {v}" for k, v in decisions.most_common()),
            ", ".join(f"{k}: {v}" for k, v in sorted(arms.items())),
            ", ".join(f"{k} {v}" for k, v in points.most_common()) or "-",
        )
    return table


def main(argv: list[str] | None = None) -> int:
    """Replay every session folder under the given ones at each slowdown; print the table."""
    parser = argparse.ArgumentParser(prog="python -m flows.research.shifted")
    parser.add_argument("release", type=Path, help="the release whose gate settings decide")
    parser.add_argument("sessions", type=Path, nargs="+", help="folders of session-N folders")
    parser.add_argument("--slowdown", type=float, nargs="+", default=[0.0, 0.05, 0.07, 0.10])
    parser.add_argument(
        "--report-only", nargs="+", default=[], metavar="WORKLOAD",
        help="replay as if these workloads said gate: false",
    )  # fmt: skip
    args = parser.parse_args(argv)
    settings = load_release(args.release).gates.benchmark
    rows = []
    for folder in session_folders(args.sessions):
        arms, ledger = read_session(folder)
        named = {str(entry["name"]) for entry in suite_entries(arms[0][1])}
        if missing := set(args.report_only) - named:
            raise SystemExit(f"{folder}: no workload named {', '.join(sorted(missing))}")
        name = f"{folder.parent.name}/{folder.name}"
        rows += [
            replay(name, arms, settings, ledger, s, reported_only=args.report_only)
            for s in args.slowdown
        ]
    out_console.print(_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
