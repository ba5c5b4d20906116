"""The resolution forecast is the gate's own interval at the ledger's noise, look by look."""

from __future__ import annotations

import math

import pytest

from flows.bench.compare import slower_alpha
from flows.bench.resolution import GatedRow, forecast, half_width, roles, sd_upper_factor
from flows.bench.stats import Arm, SlowerRule, estimate_arms, look_alpha

SD = 0.045  # arm-to-arm SD of the gated points over the 20 real A/A sessions (docs/statistics.md)


def _row(
    sd: float = SD, gaps: int = 3, tolerance: float = 15.0, point: str = "step/grid"
) -> GatedRow:
    # gaps of equal size whose implied arm SD is exactly `sd` (a gap holds two arms)
    return GatedRow(point=point, metric="engine_cpu_ms", higher_is_better=False,
                    tolerance_pct=tolerance, gaps=(sd * math.sqrt(2),) * gaps)  # fmt: skip


def _gate_half_width(arms: list[Arm], gaps: tuple[float, ...], alpha: float) -> float:
    """Half the log-width of the interval estimate_arms decides on."""
    found = estimate_arms(arms, higher_is_better=False, ledger_gaps=gaps, alpha=alpha)
    assert found.low_pct is not None
    assert found.high_pct is not None
    return (math.log1p(found.high_pct / 100) - math.log1p(found.low_pct / 100)) / 2


def test_two_arms_and_a_ledger_give_exactly_the_gates_interval() -> None:
    row, alpha = _row(gaps=4), look_alpha(5)
    arms = [Arm(candidate=True, values=(110.0,)), Arm(candidate=False, values=(100.0,))]
    expected = half_width(2, SD, 4, alpha)
    assert _gate_half_width(arms, row.gaps, alpha) == pytest.approx(expected, rel=1e-9)


def test_three_arms_count_the_sessions_own_gap_as_the_gate_does() -> None:
    # C1, P, C2 fit exactly with drift, so the only arm-level evidence is the ledger plus the
    # session's own C1/C2 gap; a gap of the ledger's size gives the forecast's variance.
    row, alpha = _row(gaps=2), look_alpha(5)
    c2 = math.exp(-SD * math.sqrt(2))
    arms = [Arm(candidate=True, values=(1.0,)), Arm(candidate=False, values=(0.9,)),
            Arm(candidate=True, values=(c2,))]  # fmt: skip
    expected = half_width(3, SD, 2, alpha)
    assert _gate_half_width(arms, row.gaps, alpha) == pytest.approx(expected, rel=1e-9)


def test_no_ledger_and_two_arms_resolve_nothing() -> None:
    assert math.isinf(half_width(2, SD, 0, look_alpha(5)))


def test_the_interval_narrows_as_arms_are_added_and_uses_pococks_level() -> None:
    found = forecast([_row()], first_arms=3, max_arms=7)
    widths = [look.half_width_pct for look in found.rows[0].looks]
    assert [look.arms for look in found.rows[0].looks] == [3, 4, 5, 6, 7]
    assert widths == sorted(widths, reverse=True)
    assert found.alpha == look_alpha(5)
    # the measured noise of this machine: about +-11.5 % after seven arms, +-25 % after three
    assert widths[-1] == pytest.approx(11.5, abs=0.1)
    assert widths[0] == pytest.approx(24.8, abs=0.1)


def test_slower_is_split_one_sided_among_the_gated_rows() -> None:
    rows = [_row(point=f"p/{i}") for i in range(4)]
    found = forecast(rows, first_arms=3, max_arms=7)
    assert found.slower_alpha == slower_alpha(look_alpha(5), 4, 5, SlowerRule.SIGNIFICANT)
    assert found.slower_alpha == pytest.approx(look_alpha(5) / 2)
    last = found.rows[0].last
    assert last.slower_half_width_pct > last.half_width_pct


def test_a_tolerance_finer_than_the_last_look_is_unresolved_with_both_remedies() -> None:
    found = forecast([_row(tolerance=3.0)], first_arms=3, max_arms=7)
    row = found.rows[0]
    assert found.unresolved == [row]
    assert row.arms_needed is None  # no session up to 40 arms gets to +-3 % at 4.5 % noise
    resolved = forecast([_row(tolerance=10.0)], first_arms=3, max_arms=7).rows[0]
    assert not resolved.resolved
    assert resolved.arms_needed == 9
    assert half_width(9, SD, 3, look_alpha(5)) < math.log1p(0.10)
    # the tolerance it can prove: an unchanged release passes by the last look 9 times in 10
    assert resolved.provable_pct == pytest.approx(16.5, abs=0.1)
    assert forecast([_row(tolerance=16.5)], first_arms=3, max_arms=7).rows[0].last.pass_chance == (
        pytest.approx(0.9, abs=0.01)
    )


def test_quiet_noise_resolves_the_tolerance_early() -> None:
    row = forecast([_row(sd=0.015, tolerance=15.0)], first_arms=3, max_arms=7).rows[0]
    assert row.resolved
    assert row.arms_needed == 3
    assert row.looks[0].pass_chance > 0.9


def test_a_row_without_gaps_is_named_not_forecast() -> None:
    found = forecast([_row(), _row(gaps=0, point="prefix/2048")], first_arms=3, max_arms=7)
    assert [row.point for row in found.rows] == ["step/grid"]
    assert found.unknown == ["prefix/2048 engine_cpu_ms"]


def test_sessions_alternate_from_the_candidate() -> None:
    assert roles(5) == [True, False, True, False, True]


def test_few_gaps_bound_the_sd_loosely() -> None:
    # chi-square with 2 df: 10 % of estimates fall below 0.211 of the true variance
    assert sd_upper_factor(2) == pytest.approx(math.sqrt(2 / 0.2107), rel=1e-3)
    assert sd_upper_factor(10) < sd_upper_factor(3) < sd_upper_factor(2)
    row = forecast([_row(gaps=2)], first_arms=3, max_arms=7).rows[0]
    assert row.boot_sd_high_pct == pytest.approx(100 * SD * sd_upper_factor(2))
