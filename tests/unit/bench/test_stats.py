"""The recipe-identical statistics and the arm-level estimator behave as documented."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flows.bench.stats import (
    Arm,
    Described,
    SlowerRule,
    Verdict,
    describe,
    difference,
    estimate_arms,
    geomean,
    non_inferiority,
    recipe_regression,
    recipe_t95,
    recipe_verdict,
    t975,
)
from flows.research.montecarlo import SimulationSettings, false_positive_limit, simulate


def test_recipe_t_table_uses_lower_bound_lookup() -> None:
    assert recipe_t95(2) == 4.303
    assert recipe_t95(11.9) == 2.228  # 10 is the largest listed df <= 11.9
    assert recipe_t95(500) == 1.980
    assert recipe_t95(0.4) == 12.706


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.7062), (4, 2.7764), (10, 2.2281), (45, 2.0141), (100, 1.9840), (math.inf, 1.96)],
)
def test_t975_matches_published_quantiles(df: float, expected: float) -> None:
    assert t975(df) == pytest.approx(expected, abs=2e-3)


def test_t975_rejects_df_below_one() -> None:
    with pytest.raises(ValueError, match="df >= 1"):
        t975(0.5)


def test_describe_matches_the_recipes_stored_point() -> None:
    """r6d TP4 prose-c1 step_ms samples -> the describe() object stored in bench.json."""
    stored = {"n": 3, "mean": 31.586, "median": 31.574, "min": 31.504, "max": 31.68}
    got = describe([31.574, 31.504, 31.68]).rounded()
    assert got.model_dump(include=set(stored)) == stored
    assert got.sd == 0.089
    assert got.ci95 == 0.22
    assert got.ci95_pct == 0.7


def test_describe_single_value_has_no_spread() -> None:
    one = describe([5.0])
    assert (one.n, one.sd, one.ci95) == (1, 0.0, 0.0)


def _d(mean: float, sd: float, n: int) -> Described:
    return Described(n=n, mean=mean, median=mean, min=mean, max=mean, sd=sd, ci95=0, ci95_pct=0)


def test_difference_is_welch_with_recipe_df_rule() -> None:
    new, ref = _d(110.0, 2.0, 3), _d(100.0, 1.0, 3)
    change = difference(new, ref)
    assert change is not None
    v_new, v_ref = 4 / 3, 1 / 3
    df = (v_new + v_ref) ** 2 / (v_new**2 / 2 + v_ref**2 / 2)  # 2.94 -> table df 2
    assert recipe_t95(df) == 4.303
    half = 4.303 * math.sqrt(v_new + v_ref) / 100
    assert change.pct == pytest.approx(10.0)
    assert change.low == pytest.approx(100 * (0.1 - half))
    assert change.high == pytest.approx(100 * (0.1 + half))


def test_difference_with_zero_variance_uses_df_120_and_needs_two_samples() -> None:
    change = difference(_d(101.0, 0.0, 3), _d(100.0, 0.0, 3))
    assert change is not None
    assert (change.low, change.high) == pytest.approx((1.0, 1.0))
    assert difference(_d(1.0, 0.0, 1), _d(1.0, 0.0, 3)) is None


def test_recipe_verdict_and_regression_mirror_for_times() -> None:
    change = difference(_d(90.0, 0.5, 3), _d(100.0, 0.5, 3))
    assert change is not None
    assert recipe_verdict(change, higher_is_better=True) == "slower"
    assert recipe_verdict(change, higher_is_better=False) == "faster"
    assert recipe_regression(change, higher_is_better=True, tolerance_pct=3.0)
    assert not recipe_regression(change, higher_is_better=True, tolerance_pct=15.0)


@pytest.mark.parametrize(
    ("low", "high", "higher", "verdict"),
    [
        (0.5, 4.0, True, Verdict.FASTER),
        (-2.9, 4.0, True, Verdict.LEVEL),
        (-3.5, 1.0, True, Verdict.INCONCLUSIVE),
        (-8.0, -3.1, True, Verdict.SLOWER),
        (3.1, 8.0, False, Verdict.SLOWER),  # a time grew by more than the tolerance
        (-4.0, -0.5, False, Verdict.FASTER),
        (-1.0, 3.5, False, Verdict.INCONCLUSIVE),
    ],
)
def test_non_inferiority_verdicts(low: float, high: float, higher: bool, verdict: Verdict) -> None:
    middle = (low + high) / 2
    for rule in SlowerRule:
        decided = non_inferiority(
            low, high, change_pct=middle, higher_is_better=higher, tolerance_pct=3.0, rule=rule
        )
        assert decided is verdict
    assert verdict.passes == (verdict in (Verdict.FASTER, Verdict.LEVEL))


@pytest.mark.parametrize(
    ("low", "high", "change", "higher", "verdict"),
    [
        (-9.0, -1.0, -5.0, True, Verdict.SLOWER),  # surely slower, estimated beyond 3 %
        (1.0, 9.0, 5.0, False, Verdict.SLOWER),  # a time, mirrored
        (-9.0, -1.0, -2.5, True, Verdict.INCONCLUSIVE),  # surely slower, but within 3 %
        (-11.0, 0.5, -5.0, True, Verdict.INCONCLUSIVE),  # beyond 3 %, but not surely slower
    ],
)
def test_slower_is_the_recipes_regression_rule_at_arm_level(
    low: float, high: float, change: float, higher: bool, verdict: Verdict
) -> None:
    """Slower: the interval clear of zero and the estimate beyond the tolerance, as the recipe's
    `bench --compare` flags a regression; the older rule needed the interval beyond it."""
    decided = non_inferiority(
        low, high, change_pct=change, higher_is_better=higher, tolerance_pct=3.0
    )
    assert decided is verdict
    older = non_inferiority(
        low, high, change_pct=change, higher_is_better=higher, tolerance_pct=3.0,
        rule=SlowerRule.INTERVAL,
    )  # fmt: skip
    assert older is Verdict.INCONCLUSIVE


def test_cpc_estimate_cancels_linear_drift_and_uses_the_ledger() -> None:
    """D = (log C1 + log C2)/2 - log P; interval D +- t_K * sqrt(3/4) * RMS(gaps).

    The gaps are the ledger's plus the session's own C1 - C2 (drift makes it conservative).
    """
    c1, p, c2 = [100.0, 100.0], [98.0, 98.0], [104.0, 104.0]  # drift +2 per arm, no change
    gaps = [0.01, -0.02, 0.015, -0.005]
    est = estimate_arms(
        [
            Arm(candidate=True, values=c1),
            Arm(candidate=False, values=p),
            Arm(candidate=True, values=c2),
        ],
        higher_is_better=True,
        ledger_gaps=gaps,
    )
    d = (math.log(100) + math.log(104)) / 2 - math.log(98)
    assert est.change_pct == pytest.approx(100 * math.expm1(d))
    pooled = [*gaps, math.log(100 / 104)]
    rms = math.sqrt(np.mean(np.square(pooled)))
    half = t975(5) * math.sqrt(0.75) * rms
    assert est.boot_low_pct == pytest.approx(100 * math.expm1(d - half))
    assert est.boot_high_pct == pytest.approx(100 * math.expm1(d + half))
    assert est.boot_df == 5


def test_three_arms_without_ledger_use_their_own_gap_with_one_df() -> None:
    """C1, P, C2 alone: D +- t(1) * sqrt(3/4) * |C1 - C2|, honest but wide."""
    c1, p, c2 = [100.0, 100.5], [100.0, 100.5], [103.0, 103.5]
    arms = [Arm(candidate=c, values=v) for c, v in ((True, c1), (False, p), (True, c2))]
    est = estimate_arms(arms, higher_is_better=True)
    a = math.log(100.25 / 103.25)
    d = (math.log(100.25) + math.log(103.25)) / 2 - math.log(100.25)
    half = t975(1) * math.sqrt(0.75) * abs(a)
    assert est.boot_df == 1
    assert est.boot_low_pct == pytest.approx(100 * math.expm1(d - half))
    assert est.boot_high_pct == pytest.approx(100 * math.expm1(d + half))
    assert est.verdict is Verdict.INCONCLUSIVE  # [-27 %, +38 %]


def test_two_arms_without_ledger_cannot_see_boot_noise() -> None:
    arms = [Arm(candidate=c, values=[100.0, 101.0]) for c in (True, False)]
    est = estimate_arms(arms, higher_is_better=True)
    assert est.verdict is Verdict.INCONCLUSIVE
    assert est.low_pct is None
    assert est.within_low_pct is not None


def test_more_interleaved_arms_give_an_in_session_interval() -> None:
    values = [100.0, 80.0, 100.5, 80.2, 99.8]  # C P C P C: candidate about 25 % faster
    arms = [Arm(candidate=i % 2 == 0, values=[v, v * 1.001]) for i, v in enumerate(values)]
    est = estimate_arms(arms, higher_is_better=True)
    assert est.boot_df == 2
    assert est.verdict is Verdict.FASTER
    assert est.low_pct is not None
    assert est.low_pct > 20


def test_estimator_rejects_missing_roles_and_non_positive_values() -> None:
    with pytest.raises(ValueError, match="candidate arm and one previous"):
        estimate_arms([Arm(candidate=True, values=[1.0])] * 2, higher_is_better=True)
    with pytest.raises(ValueError, match="positive"):
        estimate_arms(
            [Arm(candidate=True, values=[1.0]), Arm(candidate=False, values=[0.0])],
            higher_is_better=True,
        )


def test_geomean() -> None:
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)


@pytest.mark.parametrize("boot_sd", [0.0, 0.01, 0.02])
def test_monte_carlo_false_positive_rate_at_most_five_percent(boot_sd: float) -> None:
    """The decision interval declares a change of a null effect <= 5 % of the time."""
    sessions = 1500
    rates = simulate(boot_sd, 0.0, sessions, np.random.default_rng(7))
    assert rates.declared_change <= false_positive_limit(sessions)
    if boot_sd >= 0.01:  # the naive within-arm rule would have failed this check
        assert rates.within_only_change > 0.2


def test_monte_carlo_gate_rarely_passes_a_slowdown_at_the_tolerance() -> None:
    sessions = 1500
    rng = np.random.default_rng(11)
    at_tolerance = simulate(0.01, -0.03, sessions, rng)
    assert at_tolerance.passed <= false_positive_limit(sessions, nominal=0.025)
    power = simulate(0.0, 0.03, sessions, rng)
    assert power.declared_change > 0.9


def test_monte_carlo_without_a_ledger_stays_honest() -> None:
    """C1, P, C2 alone (own gap, t with 1 df): false positives <= 5 % at 1 % boot noise."""
    sessions = 1500
    rates = simulate(
        0.01, 0.0, sessions, np.random.default_rng(5), SimulationSettings(ledger_gaps=0)
    )
    assert rates.declared_change <= false_positive_limit(sessions)
    assert rates.passed < 0.5  # mostly inconclusive: one df says little
