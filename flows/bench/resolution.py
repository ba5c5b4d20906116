"""What a cluster can resolve before a run: the interval the benchmark gate expects per look.

A tolerance tighter than the interval a cluster's noise allows in `max_arms` arms can never be
met by an unchanged release: the session ends inconclusive after every arm it may run, and the
operator learns it an hour later. The A/A ledger already says how much one arm's mean scatters
between boots on this cluster and suite, so the half-width the gate will compute after n arms
can be forecast before anything boots, with the gate's own statistics: the design `estimate_arms`
fits (roles, drift, the session's own C1/C2 gap), the ledger's gaps as df, each look at Pocock's
level for the session's looks (what a pass needs), and the slower verdict's level split one-sided
among the gated rows (what naming a slowdown needs).

The forecast takes the ledger's arm-to-arm SD as the SD the session will see; the within-arm
interval, the gate's second condition, is left out: an arm's mean already carries its sampling
noise, so the arm-level interval is the wider one in expectation. Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

from pydantic import BaseModel, ConfigDict, Field

from flows.bench.compare import slower_alpha
from flows.bench.stats import SlowerRule, look_alpha, session_design, t_two_sided

_FROZEN = ConfigDict(frozen=True, extra="forbid")
MOST_ARMS = 40
"""The most arms a remedy proposes: past this a cluster is too noisy for the tolerance."""
LIKELY = 0.9
"""How likely an unchanged release must pass at the last look for a proposed tolerance."""


class GatedRow(BaseModel):
    """One gated point and metric with its tolerance and the ledger's gaps for it."""

    model_config = _FROZEN

    point: str = Field(description="point name, e.g. step/grid")
    metric: str = Field(description="gated metric, e.g. engine_cpu_ms")
    higher_is_better: bool = Field(description="direction of the metric")
    tolerance_pct: float = Field(gt=0, description="allowed slowdown of this row, percent")
    gaps: tuple[float, ...] = Field(description="A/A gaps log(C1/C2) of the ledger for this row")

    @property
    def boot_sd(self) -> float | None:
        """Arm-to-arm SD of one arm's log mean implied by the gaps (a gap holds two arms)."""
        if not self.gaps:
            return None
        return math.sqrt(sum(g * g for g in self.gaps) / (2 * len(self.gaps)))


class Look(BaseModel):
    """What the gate expects of one row after `arms` arms."""

    model_config = _FROZEN

    arms: int = Field(description="arms run at this look")
    half_width_pct: float = Field(description="interval half-width an unchanged release gets, %")
    slower_half_width_pct: float = Field(description="half-width at the slower verdict's level, %")
    pass_chance: float = Field(description="chance an unchanged release passes at this look")


class RowResolution(BaseModel):
    """One gated row's forecast over every look of the session."""

    model_config = _FROZEN

    point: str
    metric: str
    tolerance_pct: float
    boot_sd_pct: float = Field(description="arm-to-arm SD the ledger implies, %")
    boot_sd_high_pct: float = Field(
        description="its one-sided 90 % upper bound, %: a ledger of few gaps estimates it loosely"
    )
    ledger_gaps: int = Field(description="gaps the forecast rests on")
    looks: list[Look] = Field(description="one per look, first arms to max_arms")
    arms_needed: int | None = Field(
        description="fewest arms whose half-width fits inside the tolerance (None: not by 40)"
    )
    provable_pct: float = Field(
        description="smallest tolerance an unchanged release passes by max_arms 9 times in 10, %"
    )

    @property
    def last(self) -> Look:
        """The look at max_arms."""
        return self.looks[-1]

    @property
    def resolved(self) -> bool:
        """Whether the half-width at max_arms fits inside the tolerance."""
        return self.last.half_width_pct < self.tolerance_pct


class Resolution(BaseModel):
    """The forecast of every gated row of one release on one cluster and suite."""

    model_config = _FROZEN

    first_arms: int = Field(description="arms of the first session")
    max_arms: int = Field(description="most arms the release allows")
    alpha: float = Field(description="two-sided error of each look (Pocock)")
    slower_alpha: float = Field(description="two-sided error a slower verdict also holds at")
    rows: list[RowResolution] = Field(description="gated rows the ledger has gaps for")
    unknown: list[str] = Field(description="gated rows the ledger has no gap for")

    @property
    def unresolved(self) -> list[RowResolution]:
        """Rows whose tolerance is tighter than the interval at max_arms."""
        return [row for row in self.rows if not row.resolved]


def roles(arms: int) -> list[bool]:
    """Candidate flags of a session of `arms` arms in the gate's order C1, P1, C2, P2, ..."""
    return [index % 2 == 0 for index in range(arms)]


def half_width(arms: int, boot_sd: float, gaps: int, alpha: float) -> float:
    """Expected half-width (log scale) of the arm-level interval after `arms` arms, when each
    arm's log mean scatters by `boot_sd` and the ledger holds `gaps` gaps (inf: no df)."""
    factor, own_df, own_gaps = session_design(roles(arms))
    df = own_df + own_gaps + gaps
    if df < 1:
        return math.inf
    return t_two_sided(df, alpha) * math.sqrt(factor) * boot_sd


def sd_upper_factor(gaps: int, confidence: float = 0.9) -> float:
    """How far above its estimate an SD from `gaps` gaps may lie at this one-sided confidence:
    sqrt(gaps / chi2 quantile), e.g. 3.1 for two gaps, 1.6 for ten."""
    from scipy.special import chdtri  # noqa: PLC0415 - half a second to import; few callers need it

    return math.sqrt(gaps / float(chdtri(gaps, confidence))) if gaps else math.inf


def _pass_chance(row: GatedRow, arms: int, half: float, boot_sd: float) -> float:
    """Chance an unchanged release's interval lies inside the tolerance on the bad side."""
    if math.isinf(half):
        return 0.0
    se = math.sqrt(session_design(roles(arms))[0]) * boot_sd
    bound = (
        -math.log1p(-row.tolerance_pct / 100) if row.higher_is_better
        else math.log1p(row.tolerance_pct / 100)
    )  # fmt: skip
    if se == 0:
        return 1.0 if half < bound else 0.0
    return NormalDist().cdf((bound - half) / se)


def _pct(log_half: float) -> float:
    return math.inf if math.isinf(log_half) else 100 * math.expm1(log_half)


def _provable(arms: int, boot_sd: float, gaps: int, alpha: float) -> float:
    """Tolerance (%) an unchanged release passes by this look with chance LIKELY."""
    half = half_width(arms, boot_sd, gaps, alpha)
    se = math.sqrt(session_design(roles(arms))[0]) * boot_sd
    return _pct(half + NormalDist().inv_cdf(LIKELY) * se)


def _row(row: GatedRow, first: int, max_arms: int, alphas: tuple[float, float]) -> RowResolution:
    boot_sd = row.boot_sd or 0.0
    gaps = len(row.gaps)
    looks = []
    for arms in range(first, max_arms + 1):
        half = half_width(arms, boot_sd, gaps, alphas[0])
        strict = half_width(arms, boot_sd, gaps, alphas[1])
        looks.append(
            Look(
                arms=arms,
                half_width_pct=_pct(half),
                slower_half_width_pct=_pct(strict),
                pass_chance=_pass_chance(row, arms, half, boot_sd),
            )
        )
    needed = next(
        (
            arms
            for arms in range(first, MOST_ARMS + 1)
            if _pct(half_width(arms, boot_sd, gaps, alphas[0])) < row.tolerance_pct
        ),
        None,
    )
    return RowResolution(
        point=row.point,
        metric=row.metric,
        tolerance_pct=row.tolerance_pct,
        boot_sd_pct=100 * boot_sd,
        boot_sd_high_pct=100 * boot_sd * sd_upper_factor(gaps),
        ledger_gaps=gaps,
        looks=looks,
        arms_needed=needed,
        provable_pct=_provable(max_arms, boot_sd, gaps, alphas[0]),
    )


def forecast(rows: Sequence[GatedRow], *, first_arms: int, max_arms: int) -> Resolution:
    """Each gated row's expected half-width after every look from the first arms to max_arms.

    The looks and levels are the gate's (`session_looks`, `look_alpha`, `slower_alpha` with the
    current slower rule), so a row resolved here is one the gate can decide level for an
    unchanged release; `slower_half_width_pct` is how far clear of no change a slowdown must
    read before the gate names it slower.
    """
    if max_arms < first_arms:
        raise ValueError(f"max_arms {max_arms} < first arms {first_arms}")
    looks = max(1, max_arms - first_arms + 1)
    alpha = look_alpha(looks)
    strict = slower_alpha(alpha, len(rows), looks, SlowerRule.SIGNIFICANT)
    known = [row for row in rows if row.gaps]
    return Resolution(
        first_arms=first_arms,
        max_arms=max_arms,
        alpha=alpha,
        slower_alpha=strict,
        rows=[_row(row, first_arms, max_arms, (alpha, strict)) for row in known],
        unknown=[f"{row.point} {row.metric}" for row in rows if not row.gaps],
    )
