"""Monte-Carlo check of the arm-level estimator: is it honest under boot-to-boot noise?

A rule that only looks at within-arm intervals declares false changes a third of the time once
boot noise reaches 1-2 %. This module simulates sessions of arms C1, P, C2 with a boot effect per
arm, per-sample noise within arms and an A/A ledger drawn from the same model, runs the real
`estimate_arms` on each, and tabulates how often a change is declared when there is none (must
stay <= 5 %), the power at a true 3 % change, and how the non-inferiority gate behaves at a true
3 % slowdown (pass rate <= 2.5 %) and a 5 % slowdown.

Run `python -m flows.research.montecarlo` to print the table.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from rich.table import Table

from flows.bench.stats import Arm, estimate_arms
from flows.ui.console import out_console

ROLES = (True, False, True)  # C1, P, C2


class SimulationSettings(BaseModel):
    """The session model the estimator is checked against."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    samples_per_arm: int = Field(default=5, description="within-arm samples per point")
    sample_sd: float = Field(default=0.01, description="per-sample relative noise")
    ledger_gaps: int = Field(default=10, description="A/A gaps in the ledger (K)")
    tolerance_pct: float = Field(default=3.0, description="practical floor of the gate")


class Rates(BaseModel):
    """How often each outcome happened over the simulated sessions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    boot_sd: float
    effect: float
    ledger_gaps: int
    sessions: int
    declared_change: float = Field(description="decision interval excludes 0")
    within_only_change: float = Field(description="within-arm interval alone excludes 0")
    passed: float = Field(description="non-inferiority gate passed (faster or level)")
    slower: float = Field(description="verdict slower")


def _arm_values(
    rng: np.random.Generator, level: float, boot_sd: float, s: SimulationSettings, arms: int
) -> np.ndarray:
    """Samples of `arms` arms (rows): a boot effect per arm plus per-sample noise, log-normal."""
    boot = rng.normal(0.0, boot_sd, (arms, 1))
    noise = rng.normal(0.0, s.sample_sd, (arms, s.samples_per_arm))
    return np.exp(level + boot + noise)


def _ledger(rng: np.random.Generator, boot_sd: float, s: SimulationSettings) -> list[float]:
    """K past A/A gaps of the same release, drawn from the same session model."""
    means = _arm_values(rng, 0.0, boot_sd, s, 2 * s.ledger_gaps).mean(axis=1)
    return list(np.log(means[0::2] / means[1::2]))


def simulate(
    boot_sd: float,
    effect: float,
    sessions: int,
    rng: np.random.Generator,
    settings: SimulationSettings | None = None,
) -> Rates:
    """Run `sessions` simulated C1, P, C2 sessions where the candidate is `effect` faster."""
    s = settings or SimulationSettings()
    declared = within_only = passed = slower = 0
    for _ in range(sessions):
        values = _arm_values(rng, 0.0, boot_sd, s, len(ROLES))
        arms = [
            Arm(candidate=candidate, values=tuple(row * (1 + effect if candidate else 1.0)))
            for candidate, row in zip(ROLES, values, strict=True)
        ]
        estimate = estimate_arms(
            arms,
            higher_is_better=True,
            ledger_gaps=_ledger(rng, boot_sd, s),
            tolerance_pct=s.tolerance_pct,
        )
        low, high = estimate.low_pct, estimate.high_pct
        declared += low is not None and high is not None and (low > 0 or high < 0)
        w_low, w_high = estimate.within_low_pct, estimate.within_high_pct
        within_only += w_low is not None and w_high is not None and (w_low > 0 or w_high < 0)
        passed += estimate.verdict.passes
        slower += estimate.verdict == "slower"
    return Rates(
        boot_sd=boot_sd,
        effect=effect,
        ledger_gaps=s.ledger_gaps,
        sessions=sessions,
        declared_change=declared / sessions,
        within_only_change=within_only / sessions,
        passed=passed / sessions,
        slower=slower / sessions,
    )


def table(sessions: int, seed: int) -> list[Rates]:
    """The printed grid: boot noise 0/1/2 % against true changes 0, +3 %, -3 %, -5 % with a
    ledger of K=10 gaps, and 0 / +3 % with none (the session's own C1-C2 gap only, t1)."""
    rng = np.random.default_rng(seed)
    no_ledger = SimulationSettings(ledger_gaps=0)
    with_ledger = [
        simulate(boot_sd, effect, sessions, rng)
        for boot_sd in (0.0, 0.01, 0.02)
        for effect in (0.0, 0.03, -0.03, -0.05)
    ]
    alone = [
        simulate(boot_sd, effect, sessions, rng, no_ledger)
        for boot_sd in (0.0, 0.01, 0.02)
        for effect in (0.0, 0.03)
    ]
    return with_ledger + alone


def render(rows: list[Rates]) -> Table:
    """A rich table of the simulated rates."""
    settings = SimulationSettings()
    out = Table(
        title=(
            f"C1,P,C2 sessions; {settings.samples_per_arm} samples/arm at "
            f"{100 * settings.sample_sd:.0f}% noise; tolerance {settings.tolerance_pct:.0f}%; "
            "K = past A/A gaps (+1: the session's own)"
        )
    )
    for name in ("K", "boot sd", "true change", "declared change", "within-arm only", "gate pass"):
        out.add_column(name, justify="right")
    out.add_column("slower", justify="right")
    for r in rows:
        out.add_row(
            str(r.ledger_gaps),
            f"{100 * r.boot_sd:.0f}%",
            f"{100 * r.effect:+.0f}%",
            f"{r.declared_change:.3f}",
            f"{r.within_only_change:.3f}",
            f"{r.passed:.3f}",
            f"{r.slower:.3f}",
        )
    return out


def false_positive_limit(sessions: int, nominal: float = 0.05) -> float:
    """The largest observed rate consistent with a true rate <= nominal (3 Monte-Carlo SEs)."""
    return nominal + 3 * math.sqrt(nominal * (1 - nominal) / sessions)


def main(argv: list[str] | None = None) -> int:
    """Print the Monte-Carlo table; exit 1 if the false-positive rate exceeds 5 %.

    The estimator's interval is exact at 5 % when boot noise dominates, so an observed rate is
    judged against 5 % plus three Monte-Carlo standard errors.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=20261202)
    args = parser.parse_args(argv)
    rows = table(args.sessions, args.seed)
    out_console.print(render(rows))
    worst = max(r.declared_change for r in rows if r.effect == 0)
    limit = false_positive_limit(args.sessions)
    out_console.print(
        f"worst false-positive rate {worst:.3f} over {args.sessions} sessions per cell "
        f"(nominal 0.050; limit with Monte-Carlo error {limit:.3f})"
    )
    return 0 if worst <= limit else 1


if __name__ == "__main__":
    raise SystemExit(main())
