"""Benchmark statistics: the recipe's per-point numbers and the arm-level release decision.

Two families live here, both pure (numbers in, numbers out):

* `describe` and `difference` reproduce the recipe's `bin/spark bench` exactly (its coarse
  two-sided 95 % t table with lower-bound lookup, sample SD, and a Welch interval with the
  Satterthwaite df), so a table we print lines up with one the recipe printed.
* `estimate_arms` is the decision we actually gate on. One arm (one boot) is the unit of
  boot-to-boot noise, so a change is estimated on the log scale across arms C1, P, C2 (, P2,
  C3 ...) with a drift term, and its interval takes the arm-level variance from the session's
  own residuals plus a ledger of past A/A gaps (t with the pooled df). The within-arm interval is
  kept as a second, necessary condition: the reported interval is the hull of both. A point
  passes when its interval rules out a loss beyond a practical tolerance (non-inferiority) and
  is slower when its interval rules out no loss at all while the estimate lies beyond the
  tolerance (the recipe's regression rule); inconclusive is never a pass. A session that looks
  again after each added arm decides each look at Pocock's level.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from enum import StrEnum

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

# The recipe's two-sided 95 % Student-t table, looked up at the largest listed df <= the df.
RECIPE_T95: dict[int, float] = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
    60: 2.000,
    120: 1.980,
}
_RECIPE_DFS = sorted(RECIPE_T95)

# Exact t(0.975, df) for df 1..30 and a few anchors; between anchors we interpolate in 1/df,
# which is accurate to about 1e-3. Kept (rather than scipy) so that records decided at 95 %
# recompute exactly; other levels come from scipy.
_T975_EXACT: dict[float, float] = {
    1: 12.7062,
    2: 4.3027,
    3: 3.1824,
    4: 2.7764,
    5: 2.5706,
    6: 2.4469,
    7: 2.3646,
    8: 2.3060,
    9: 2.2622,
    10: 2.2281,
    11: 2.2010,
    12: 2.1788,
    13: 2.1604,
    14: 2.1448,
    15: 2.1314,
    16: 2.1199,
    17: 2.1098,
    18: 2.1009,
    19: 2.0930,
    20: 2.0860,
    21: 2.0796,
    22: 2.0739,
    23: 2.0687,
    24: 2.0639,
    25: 2.0595,
    26: 2.0555,
    27: 2.0518,
    28: 2.0484,
    29: 2.0452,
    30: 2.0423,
    40: 2.0211,
    60: 2.0003,
    120: 1.9799,
    math.inf: 1.9600,
}
_T975_INVERSE = sorted((0.0 if df == math.inf else 1.0 / df, t) for df, t in _T975_EXACT.items())

DEFAULT_ALPHA = 0.05
DEFAULT_TOLERANCE_PCT = 3.0

# Pocock's constant boundary for K equally spaced looks at an overall two-sided 5 %: the
# normal quantile every look uses (Jennison and Turnbull, Group Sequential Methods, table 2.1).
_POCOCK_Z: dict[int, float] = {
    1: 1.960, 2: 2.178, 3: 2.289, 4: 2.361, 5: 2.413, 6: 2.453, 7: 2.485, 8: 2.512, 9: 2.535,
    10: 2.555, 11: 2.576, 12: 2.593, 15: 2.634, 20: 2.686,
}  # fmt: skip

_FROZEN = ConfigDict(frozen=True, extra="forbid")


def recipe_t95(df: float) -> float:
    """The recipe's t value: the table entry at the largest listed df not above `df`."""
    if df < 1:
        return RECIPE_T95[1]
    index = bisect.bisect_right(_RECIPE_DFS, df) - 1
    return RECIPE_T95[_RECIPE_DFS[index]]


def t975(df: float) -> float:
    """Two-sided 95 % Student-t quantile for any df >= 1 (fractional df allowed).

    Interpolated from a table rather than computed, so every record decided at 95 % recomputes
    to the very same digits.
    """
    if not df >= 1:
        raise ValueError(f"t quantile needs df >= 1, got {df}")
    x = 0.0 if math.isinf(df) else 1.0 / df
    xs = [point[0] for point in _T975_INVERSE]
    index = bisect.bisect_left(xs, x)
    if xs[index] == x:
        return _T975_INVERSE[index][1]
    (x0, t0), (x1, t1) = _T975_INVERSE[index - 1], _T975_INVERSE[index]
    return t0 + (t1 - t0) * (x - x0) / (x1 - x0)


def look_alpha(looks: int) -> float:
    """The two-sided error of each look of a session that may look `looks` times, so that
    deciding at any of them errs at most as often as one look at 5 % would.

    Pocock's constant boundary, from its table up to 20 looks (a look count between two
    entries takes the larger one, which errs less); past 20, 5 %/looks (Bonferroni).
    """
    if looks < 1:
        raise ValueError(f"a session looks at least once, got {looks}")
    if looks == 1:
        return DEFAULT_ALPHA
    if looks > max(_POCOCK_Z):
        return DEFAULT_ALPHA / looks
    z = _POCOCK_Z[min(k for k in _POCOCK_Z if k >= looks)]
    return math.erfc(z / math.sqrt(2))


def t_two_sided(df: float, alpha: float = DEFAULT_ALPHA) -> float:
    """Two-sided Student-t quantile: the half-width multiplier of a (1 - alpha) interval."""
    if alpha == DEFAULT_ALPHA:
        return t975(df)
    if not df >= 1:
        raise ValueError(f"t quantile needs df >= 1, got {df}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie between 0 and 1, got {alpha}")
    from scipy.special import stdtrit  # noqa: PLC0415 - half a second to import; few callers need it

    return float(stdtrit(df, 1 - alpha / 2))


class Described(BaseModel):
    """The recipe's `describe()` of one point's samples (unrounded)."""

    model_config = _FROZEN

    n: int = Field(description="number of samples")
    mean: float = Field(description="arithmetic mean")
    median: float = Field(description="median")
    min: float = Field(description="smallest sample")
    max: float = Field(description="largest sample")
    sd: float = Field(description="sample standard deviation (n-1); 0 for one sample")
    ci95: float = Field(description="half-width of the Student-t 95 % interval of the mean")
    ci95_pct: float = Field(description="ci95 as a percentage of the mean")

    def rounded(self) -> Described:
        """The same numbers rounded as the recipe stores them (3 decimals, 2 for ci95_pct)."""
        three = {k: round(v, 3) for k, v in self.model_dump().items() if k not in ("n", "ci95_pct")}
        return Described(n=self.n, ci95_pct=round(self.ci95_pct, 2), **three)


def describe(values: Sequence[float]) -> Described:
    """Summarize samples exactly like the recipe: sample SD, t95(n-1)*sd/sqrt(n), % of mean."""
    if not values:
        raise ValueError("describe needs at least one value")
    data = np.asarray(values, dtype=float)
    n = len(data)
    mean = float(data.mean())
    sd = float(data.std(ddof=1)) if n > 1 else 0.0
    ci95 = recipe_t95(n - 1) * sd / math.sqrt(n) if n > 1 else 0.0
    return Described(
        n=n,
        mean=mean,
        median=float(np.median(data)),
        min=float(data.min()),
        max=float(data.max()),
        sd=sd,
        ci95=ci95,
        ci95_pct=100.0 * ci95 / mean if mean else 0.0,
    )


class Change(BaseModel):
    """A relative change in percent with its 95 % interval."""

    model_config = _FROZEN

    pct: float = Field(description="change of the new value relative to the old, in percent")
    low: float = Field(description="lower end of the 95 % interval, percent")
    high: float = Field(description="upper end of the 95 % interval, percent")


def difference(new: Described, ref: Described) -> Change | None:
    """The recipe's Welch comparison: percent change of the means with a Welch 95 % interval.

    Returns None when either side has fewer than two samples (no variance, no interval).
    """
    if new.n < 2 or ref.n < 2 or ref.mean == 0:
        return None
    v_new = new.sd**2 / new.n
    v_ref = ref.sd**2 / ref.n
    denominator = v_new**2 / (new.n - 1) + v_ref**2 / (ref.n - 1)
    df = (v_new + v_ref) ** 2 / denominator if denominator else 120.0
    change = new.mean / ref.mean - 1.0
    half = recipe_t95(df) * math.sqrt(v_new + v_ref) / ref.mean
    return Change(pct=100 * change, low=100 * (change - half), high=100 * (change + half))


class RecipeVerdict(StrEnum):
    """The recipe's three-way reading of a Welch interval."""

    FASTER = "faster"
    SLOWER = "slower"
    SAME = "same"


def recipe_verdict(change: Change, *, higher_is_better: bool) -> RecipeVerdict:
    """faster if the interval is entirely on the good side of 0, slower if on the bad side."""
    good_low, good_high = (
        (change.low, change.high) if higher_is_better else (-change.high, -change.low)
    )
    if good_low > 0:
        return RecipeVerdict.FASTER
    if good_high < 0:
        return RecipeVerdict.SLOWER
    return RecipeVerdict.SAME


def recipe_regression(change: Change, *, higher_is_better: bool, tolerance_pct: float) -> bool:
    """The recipe's regression rule: `slower` and the change larger than the tolerance."""
    slower = recipe_verdict(change, higher_is_better=higher_is_better) is RecipeVerdict.SLOWER
    return slower and abs(change.pct) > tolerance_pct


class Verdict(StrEnum):
    """A non-inferiority decision for one point; only faster and level pass."""

    FASTER = "faster"
    LEVEL = "level"
    SLOWER = "slower"
    INCONCLUSIVE = "inconclusive"

    @property
    def passes(self) -> bool:
        """Whether the point passes the gate (inconclusive never does)."""
        return self in (Verdict.FASTER, Verdict.LEVEL)


class SlowerRule(StrEnum):
    """When a point is called slower, i.e. when the gate claims the release lost speed."""

    INTERVAL = "interval-beyond-tolerance"
    """The whole interval lies beyond the tolerance: a loss proven larger than the tolerance.
    The older rule, kept so records decided by it recompute; why it was replaced (it could not
    name a +5 % release slower at this project's noise) is in docs/statistics.md."""
    SIGNIFICANT = "significant-beyond-tolerance"
    """The whole interval lies on the slower side of zero (surely slower) and the estimate beyond
    the tolerance: the recipe's own regression rule (`bench --compare`: slower, and the change
    larger than the tolerance), read at arm level. Errs on an A/A pair no more often than the
    interval's level, since the interval must exclude zero."""


def non_inferiority(
    low_pct: float,
    high_pct: float,
    *,
    change_pct: float,
    higher_is_better: bool,
    tolerance_pct: float,
    rule: SlowerRule = SlowerRule.SIGNIFICANT,
) -> Verdict:
    """Decide from an interval of the candidate's change (percent) and a practical tolerance.

    Throughput passes when the whole interval lies above -tolerance (faster if also above 0);
    it fails as slower by `rule`: the interval wholly below zero and the change below
    -tolerance, or (the older rule) the interval wholly below -tolerance. Times are mirrored.
    The two outcomes cannot both hold, since the change lies inside the interval.
    """
    good_low, good_high = (low_pct, high_pct) if higher_is_better else (-high_pct, -low_pct)
    good_change = change_pct if higher_is_better else -change_pct
    if good_low > -tolerance_pct:
        return Verdict.FASTER if good_low > 0 else Verdict.LEVEL
    if rule is SlowerRule.INTERVAL:
        slower = good_high < -tolerance_pct
    else:
        slower = good_high < 0 and good_change < -tolerance_pct
    return Verdict.SLOWER if slower else Verdict.INCONCLUSIVE


class Arm(BaseModel):
    """One boot of one release in session order: its role and its samples of one metric."""

    model_config = _FROZEN

    candidate: bool = Field(description="True for a candidate arm, False for the previous release")
    values: tuple[float, ...] = Field(description="within-arm samples (all > 0)", min_length=1)


class ArmEstimate(BaseModel):
    """The candidate's change across arms, with the intervals it was decided on."""

    model_config = _FROZEN

    change_pct: float = Field(description="candidate vs previous, percent (e^D - 1)")
    low_pct: float | None = Field(description="decision interval (hull), None if no arm df")
    high_pct: float | None = Field(description="decision interval (hull), None if no arm df")
    boot_low_pct: float | None = Field(description="arm-level interval, None if no df")
    boot_high_pct: float | None = Field(description="arm-level interval, None if no df")
    within_low_pct: float | None = Field(description="within-arm interval, None if n < 2")
    within_high_pct: float | None = Field(description="within-arm interval, None if n < 2")
    boot_df: float = Field(description="degrees of freedom of the arm-level variance")
    arms: int = Field(description="number of arms used")
    ledger_gaps: int = Field(description="A/A gaps pooled in (ledger, plus the session's own)")
    verdict: Verdict = Field(description="non-inferiority verdict at the tolerance")
    tolerance_pct: float = Field(description="practical floor used for the verdict")
    alpha: float = Field(default=DEFAULT_ALPHA, description="two-sided error of these intervals")
    slower_alpha: float = Field(
        default=DEFAULT_ALPHA, description="the stricter error a slower verdict also held at"
    )


def _pct(log_ratio: float) -> float:
    """A log-scale difference as a percent change."""
    return 100.0 * math.expm1(log_ratio)


def _design(arms: Sequence[Arm]) -> np.ndarray:
    """Columns: intercept, candidate indicator, linear drift in session order (if estimable)."""
    count = len(arms)
    role = np.array([1.0 if arm.candidate else 0.0 for arm in arms])
    order = np.arange(count, dtype=float) - (count - 1) / 2
    columns = [np.ones(count), role]
    with_drift = np.column_stack([*columns, order])
    if count >= 3 and np.linalg.matrix_rank(with_drift) == 3:
        return with_drift
    return np.column_stack(columns)


def session_design(candidate: Sequence[bool]) -> tuple[float, int, int]:
    """What arms in this order give the change D before any is measured: the variance of D per
    unit arm-level variance, the residual df, and the session's own A/A gaps (`_own_gap`).

    The resolution forecast (`flows.bench.resolution`) reads the very design `estimate_arms`
    fits, so the interval it expects is the one the gate computes at the same noise.
    """
    arms = [Arm(candidate=flag, values=(1.0,)) for flag in candidate]
    design = _design(arms)
    inverse = np.linalg.inv(design.T @ design)
    own_df = len(arms) - design.shape[1]
    own_gaps = int(own_df == 0 and len(arms) == 3 and candidate[0] == candidate[2])
    return float(inverse[1, 1]), own_df, own_gaps


def _within_variance(arms: Sequence[Arm], weights: np.ndarray) -> tuple[float, float] | None:
    """Variance of D from within-arm sampling (delta method) and its Satterthwaite df."""
    if any(len(arm.values) < 2 for arm in arms):
        return None
    parts = []
    dfs = []
    for arm, weight in zip(arms, weights, strict=True):
        data = np.asarray(arm.values)
        parts.append(weight**2 * data.var(ddof=1) / (len(data) * data.mean() ** 2))
        dfs.append(len(data) - 1)
    total = float(sum(parts))
    if total == 0:
        return 0.0, math.inf
    denominator = sum(part**2 / df for part, df in zip(parts, dfs, strict=True))
    return total, total**2 / denominator


def _own_gap(arms: Sequence[Arm], y: np.ndarray, own_df: int) -> list[float]:
    """The session's own A/A gap (C1 vs C2 of C1, P, C2) when the arms leave no residual df.

    It is independent of D (the drift-cancelling contrast) and overstates boot noise when
    there is drift, so pooling it with the ledger keeps the interval valid (t1 without ledger).
    """
    if own_df == 0 and len(arms) == 3 and arms[0].candidate == arms[2].candidate:
        return [float(y[0] - y[2])]
    return []


def _boot_variance(residuals: np.ndarray, gaps: np.ndarray, boot_df: float) -> float:
    """Arm-level variance of one arm's log mean: residuals and A/A gaps (a gap holds two arms)."""
    if boot_df < 1:
        return 0.0
    return (float(residuals @ residuals) + float(gaps @ gaps) / 2) / boot_df


Interval = tuple[float, float]


def _intervals(
    d: float, boot_df: float, boot_se: float, within: tuple[float, float] | None, alpha: float
) -> tuple[Interval | None, Interval | None, Interval | None]:
    """The arm-level, within-arm and decision (hull) intervals of D at a two-sided `alpha`."""
    boot = None
    if boot_df >= 1:
        half = t_two_sided(boot_df, alpha) * boot_se
        boot = (d - half, d + half)
    within_interval = None
    if within is not None:
        variance, df = within
        half = (t_two_sided(max(df, 1.0), alpha) if variance else 0.0) * math.sqrt(variance)
        within_interval = (d - half, d + half)
    if boot is None:
        return None, within_interval, None
    if within_interval is None:
        return boot, None, boot
    hull = (min(boot[0], within_interval[0]), max(boot[1], within_interval[1]))
    return boot, within_interval, hull


def estimate_arms(
    arms: Sequence[Arm],
    *,
    higher_is_better: bool,
    ledger_gaps: Sequence[float] = (),
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
    alpha: float = DEFAULT_ALPHA,
    slower_alpha: float | None = None,
    slower_rule: SlowerRule = SlowerRule.SIGNIFICANT,
) -> ArmEstimate:
    """Estimate the candidate's change over interleaved arms and decide non-inferiority.

    Args:
        arms: arms in session order (C1, P, C2, ...), at least one of each role.
        higher_is_better: True for throughput, False for times.
        ledger_gaps: past A/A gaps log(C1) - log(C2), each worth one df of arm variance.
        tolerance_pct: the practical floor, e.g. 3 (%).
        alpha: the two-sided error of each interval (0.05: 95 %); a session that looks several
            times decides each look at `look_alpha(looks)`.
        slower_alpha: the stricter error a "slower" verdict must also hold at (default `alpha`):
            a session fails when any of its gated points is slower, so the comparison divides
            `alpha` by their number; passing needs every point, so it needs no such division.
        slower_rule: what an interval must show for a slower verdict (`SlowerRule`).

    Raises:
        ValueError: when a role is missing or a value is not positive.
    """
    if not any(a.candidate for a in arms) or all(a.candidate for a in arms):
        raise ValueError("need at least one candidate arm and one previous arm")
    if any(v <= 0 for a in arms for v in a.values):
        raise ValueError("arm values must be positive (log scale)")
    slower_alpha = alpha if slower_alpha is None else slower_alpha
    y = np.log([float(np.mean(a.values)) for a in arms])
    design = _design(arms)
    inverse = np.linalg.inv(design.T @ design)
    weights = (inverse @ design.T)[1]
    d = float(weights @ y)
    residuals = y - design @ (inverse @ design.T @ y)
    own_df = len(arms) - design.shape[1]
    gaps = np.asarray([*ledger_gaps, *_own_gap(arms, y, own_df)], dtype=float)
    boot_df = float(own_df + len(gaps))
    boot_se = math.sqrt(inverse[1, 1] * _boot_variance(residuals, gaps, boot_df))
    within = _within_variance(arms, weights)
    boot, within_interval, hull = _intervals(d, boot_df, boot_se, within, alpha)
    verdict = Verdict.INCONCLUSIVE  # no arm-level df: boot noise unknown, so no decision
    if hull is not None:
        verdict = non_inferiority(
            _pct(hull[0]), _pct(hull[1]), change_pct=_pct(d), higher_is_better=higher_is_better,
            tolerance_pct=tolerance_pct, rule=slower_rule,
        )  # fmt: skip
    if verdict is Verdict.SLOWER and slower_alpha < alpha:
        # Calling a release slower is a claim about any of the gated points: it must hold at
        # the stricter level too, or the point stays undecided.
        strict = _intervals(d, boot_df, boot_se, within, slower_alpha)[2]
        if strict is None or non_inferiority(
            _pct(strict[0]), _pct(strict[1]), change_pct=_pct(d),
            higher_is_better=higher_is_better, tolerance_pct=tolerance_pct, rule=slower_rule,
        ) is not Verdict.SLOWER:  # fmt: skip
            verdict = Verdict.INCONCLUSIVE
    pct = _pct
    return ArmEstimate(
        change_pct=pct(d),
        low_pct=pct(hull[0]) if hull else None,
        high_pct=pct(hull[1]) if hull else None,
        boot_low_pct=pct(boot[0]) if boot else None,
        boot_high_pct=pct(boot[1]) if boot else None,
        within_low_pct=pct(within_interval[0]) if within_interval else None,
        within_high_pct=pct(within_interval[1]) if within_interval else None,
        boot_df=boot_df,
        arms=len(arms),
        ledger_gaps=len(gaps),
        verdict=verdict,
        tolerance_pct=tolerance_pct,
        alpha=alpha,
        slower_alpha=slower_alpha,
    )


def aa_gap(first: Sequence[float], second: Sequence[float]) -> float:
    """One A/A ledger entry: log of the ratio of two arms' means of the same release."""
    return math.log(float(np.mean(first)) / float(np.mean(second)))


def geomean(values: Sequence[float]) -> float:
    """Geometric mean (for summarizing a grid of step times over shapes)."""
    if not values or any(v <= 0 for v in values):
        raise ValueError("geomean needs positive values")
    return float(np.exp(np.mean(np.log(values))))
