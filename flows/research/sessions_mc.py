"""Monte-Carlo check of whole benchmark sessions: several gated points, arms added while undecided.

`montecarlo` checks one estimate of one point. A gate decides a session: every gated point is
estimated after C1, P, C2, arms are added (P2, C3, ...) while any is undecided, up to `max_arms`,
and a single slower point fails the release. Looking again after each arm
and looking at many points both raise the chance of a false "slower"; this simulates sessions
through the gate's own rules (`run_session`, `compare_arms`, `session_decision`) on synthetic
arms with a boot effect per arm and per-sample noise, and tabulates how often an A/A session is
called slower (target: at most 1 in 20), how often a 5 % slower candidate is, and how many arms
a 25 % faster candidate needs.

    python -m flows.research.sessions_mc [--sessions 400] [--sample-sd 0.1 --boot-sd 0.1]
"""

from __future__ import annotations

import argparse
import collections

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from rich.table import Table

from flows.bench.compare import Comparison, compare_arms
from flows.bench.ledger import Ledger
from flows.bench.report import ArmReport, Point, Sample
from flows.bench.stats import Verdict
from flows.gates.benchmark.rules import Focus, Role, focused_arm, run_session, session_looks
from flows.ui.console import out_console

METRIC = "engine_cpu_ms"


class SessionModel(BaseModel):
    """The noise and the gate settings a simulated session runs under."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    points: int = Field(default=6, description="gated points")
    samples: int = Field(default=3, description="samples per point and arm")
    sample_sd: float = Field(default=0.03, description="per-sample log SD")
    boot_sd: float = Field(default=0.01, description="per-arm log SD of the boot effect")
    ledger_gaps: int = Field(default=2, description="A/A gaps in the ledger (a 3-arm calibration)")
    max_arms: int = Field(default=7, description="most arms of a session")
    tolerance_pct: float = Field(default=3.0, description="practical floor")
    split_error: bool = Field(
        default=True,
        description="each look at Pocock's level and a slower verdict also at that over the "
        "gated points, as the gate does (False: every look at 95 %)",
    )


class Outcome(BaseModel):
    """What the simulated sessions of one cell ended with."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    change: float
    model: SessionModel
    decisions: dict[str, float]
    mean_arms: float
    within_five: float = Field(description="share decided (pass or slower) within 5 arms")
    wrong_way: float = Field(
        description="share of sessions with a gated point decided against the true change: "
        "faster or level for a slower candidate, slower for an unchanged or faster one"
    )


def _arm(rng: np.random.Generator, label: str, level: float, m: SessionModel) -> ArmReport:
    boot = rng.normal(0.0, m.boot_sd)
    points = {}
    for index in range(m.points):
        values = np.exp(level + boot + rng.normal(0.0, m.sample_sd, m.samples)) * 10.0
        samples = [Sample(metrics={METRIC: float(v)}) for v in values]
        points[f"p{index}"] = Point(workload="single_stream", gate=[METRIC], samples=samples)
    return ArmReport(label=label, source="simulation", url="http://127.0.0.1:1", suite="sim",
                     started_utc="2026-12-03T00:00:00+00:00", points=points)  # fmt: skip


def _ledger(rng: np.random.Generator, m: SessionModel) -> Ledger:
    ledger = Ledger()
    for gap in range(m.ledger_gaps):
        ledger = ledger.with_session(_arm(rng, f"a{gap}", 0.0, m), _arm(rng, f"b{gap}", 0.0, m))
    return ledger


def simulate(change: float, m: SessionModel, sessions: int, rng: np.random.Generator) -> Outcome:
    """`sessions` sessions where the candidate's step time is `change` (e.g. +0.05) longer."""
    decisions: collections.Counter[str] = collections.Counter()
    arms = within = wrong = 0
    first: list[Role] = ["candidate", "previous", "candidate"]
    looks = session_looks(len(first), m.max_arms) if m.split_error else None
    for _ in range(sessions):
        ledger = _ledger(rng, m) if m.ledger_gaps else None
        level = float(np.log1p(change))

        def measure(index: int, role: Role, focus: Focus, level: float = level) -> ArmReport:
            arm = _arm(rng, f"{index}-{role}", level if role == "candidate" else 0.0, m)
            return focused_arm(arm, focus)

        def compare(
            new: list[ArmReport], old: list[ArmReport], ledger: Ledger | None = ledger
        ) -> Comparison:
            return compare_arms(new, old, ledger=ledger, tolerance_pct=m.tolerance_pct, looks=looks)

        session = run_session(first, m.max_arms, measure, compare)
        decisions[session.decision.value] += 1
        arms += len(session.roles)
        within += len(session.roles) <= 5 and session.decision.value != "fail-inconclusive"
        wrong += any(_wrong_way(row.verdict, change) for row in session.comparison.gating)
    return Outcome(
        change=change, model=m, mean_arms=arms / sessions, within_five=within / sessions,
        decisions={k: v / sessions for k, v in decisions.items()}, wrong_way=wrong / sessions,
    )  # fmt: skip


def _wrong_way(verdict: Verdict, change: float) -> bool:
    """A verdict that contradicts the simulated truth (level is right only for no change)."""
    if change > 0:
        return verdict in (Verdict.FASTER, Verdict.LEVEL)
    return verdict is Verdict.SLOWER


def table(sessions: int, seed: int, model: SessionModel) -> list[Outcome]:
    """A/A, 5 % and 15 % slower candidates and a 20 % faster one, at the model's noise."""
    rng = np.random.default_rng(seed)
    return [simulate(change, model, sessions, rng) for change in (0.0, 0.05, 0.15, -0.2)]


def render(rows: list[Outcome]) -> Table:
    """A rich table of the simulated session outcomes."""
    m = rows[0].model
    out = Table(
        title=(
            f"{m.points} gated points, {m.samples} samples/arm at {100 * m.sample_sd:.1f}%, boot "
            f"{100 * m.boot_sd:.1f}%, ledger K={m.ledger_gaps}, max_arms {m.max_arms}, "
            f"tolerance {m.tolerance_pct:g}%, each look at "
            f"{'Pocock, slower over points' if m.split_error else '95 %'}"
        )
    )
    columns = ("step time change", "pass", "slower", "inconclusive", "mean arms", "decided <=5",
               "a point the wrong way")  # fmt: skip
    for name in columns:
        out.add_column(name, justify="right")
    for r in rows:
        out.add_row(
            f"{100 * r.change:+.0f}%",
            f"{r.decisions.get('pass', 0):.3f}",
            f"{r.decisions.get('fail-slower', 0):.3f}",
            f"{r.decisions.get('fail-inconclusive', 0):.3f}",
            f"{r.mean_arms:.1f}",
            f"{r.within_five:.3f}",
            f"{r.wrong_way:.3f}",
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the session table; exit 1 if an A/A session is called slower more than 1 in 20."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--sample-sd", type=float, default=0.03)
    parser.add_argument("--boot-sd", type=float, default=0.01)
    parser.add_argument("--points", type=int, default=6)
    parser.add_argument("--ledger-gaps", type=int, default=2)
    parser.add_argument("--samples", type=int, default=3, help="samples per point and arm")
    parser.add_argument("--max-arms", type=int, default=7)
    parser.add_argument(
        "--no-split", action="store_true", help="every look at 95 %% (the gate's older rule)"
    )
    args = parser.parse_args(argv)
    model = SessionModel(
        points=args.points, sample_sd=args.sample_sd, boot_sd=args.boot_sd,
        ledger_gaps=args.ledger_gaps, samples=args.samples, max_arms=args.max_arms,
        split_error=not args.no_split,
    )  # fmt: skip
    rows = table(args.sessions, args.seed, model)
    out_console.print(render(rows))
    false_slower = rows[0].decisions.get("fail-slower", 0.0)
    out_console.print(f"A/A sessions called slower: {false_slower:.3f} (target <= 0.050)")
    return 0 if false_slower <= 0.05 else 1


if __name__ == "__main__":
    raise SystemExit(main())
