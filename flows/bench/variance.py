"""Where a point's noise comes from: within an arm, between boots, and drift over a session (pure).

A change is decided across arms, so what limits a decision is the variance of an arm's mean
(on the log scale). It has three sources, which this module separates for every point and metric
of a set of arms run in one session:

* within: the scatter of samples inside one arm (one boot), pooled over arms; it reaches the arm
  mean divided by the number of samples;
* boot: what arm means scatter by beyond that, once the roles (candidate/previous) and a linear
  drift are taken out: the boot-to-boot component (method of moments, clipped at zero);
* drift: the linear trend of the arm means over the session, in percent per arm.

Each component comes with the degrees of freedom behind it, so a reader sees which estimate is
solid (within: many samples) and which is a guess (boot: a few arms).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from flows.bench.report import ArmReport


class Components(BaseModel):
    """The noise of one point and metric, as percent standard deviations of one arm's mean."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    point: str = Field(description="point name")
    metric: str = Field(description="metric")
    arms: int = Field(description="arms that measured it")
    samples: float = Field(description="mean samples per arm")
    within_sd_pct: float = Field(description="SD of one sample around its arm's mean, percent")
    within_df: int = Field(description="degrees of freedom of the within-arm variance")
    arm_sd_pct: float | None = Field(description="SD of arm means after roles and drift")
    boot_sd_pct: float | None = Field(description="arm-to-arm SD beyond sampling (clipped at 0)")
    boot_df: int = Field(description="degrees of freedom of the arm-level variance")
    drift_pct_per_arm: float | None = Field(description="linear trend of arm means per arm")


def _pct(log_sd: float) -> float:
    return 100.0 * math.expm1(log_sd)


def _design(roles: Sequence[bool]) -> np.ndarray:
    """Intercept, role (when both roles are present) and linear drift (when estimable)."""
    count = len(roles)
    columns = [np.ones(count)]
    if len(set(roles)) == 2:
        columns.append(np.array([1.0 if role else 0.0 for role in roles]))
    order = np.arange(count, dtype=float) - (count - 1) / 2
    with_drift = np.column_stack([*columns, order])
    if count > with_drift.shape[1] - 1 and np.linalg.matrix_rank(with_drift) == with_drift.shape[1]:
        return with_drift
    return np.column_stack(columns)


def decompose(
    arms: Sequence[ArmReport], roles: Sequence[bool], point: str, metric: str
) -> Components | None:
    """The components of one point and metric over arms in session order (None if unmeasured).

    `roles[i]` is True for a candidate arm; arms of one release (A/A) are all True.
    """
    logs = [np.log(values) for arm in arms if (values := _values(arm, point, metric)) is not None]
    if len(logs) != len(arms) or not logs:
        return None
    within_ss = sum(float(((x - x.mean()) ** 2).sum()) for x in logs)
    within_df = sum(len(x) - 1 for x in logs)
    within_var = within_ss / within_df if within_df else 0.0
    means = np.array([x.mean() for x in logs])
    per_arm = float(np.mean([len(x) for x in logs]))
    design = _design(roles)
    boot_df = len(arms) - design.shape[1]
    arm_sd = boot_sd = drift = None
    if boot_df > 0:
        fit, *_ = np.linalg.lstsq(design, means, rcond=None)
        residual = means - design @ fit
        arm_var = float(residual @ residual) / boot_df
        arm_sd = _pct(math.sqrt(arm_var))
        boot_sd = _pct(math.sqrt(max(arm_var - within_var / per_arm, 0.0)))
        drift = 100.0 * math.expm1(float(fit[-1])) if design.shape[1] > len(set(roles)) else None
    return Components(
        point=point,
        metric=metric,
        arms=len(arms),
        samples=per_arm,
        within_sd_pct=_pct(math.sqrt(within_var)),
        within_df=within_df,
        arm_sd_pct=arm_sd,
        boot_sd_pct=boot_sd,
        boot_df=max(boot_df, 0),
        drift_pct_per_arm=drift,
    )


def _values(arm: ArmReport, point: str, metric: str) -> np.ndarray | None:
    found = arm.points.get(point)
    values = found.values(metric) if found else []
    return np.asarray(values, dtype=float) if values and min(values) > 0 else None


def decompose_all(arms: Sequence[ArmReport], roles: Sequence[bool]) -> list[Components]:
    """Every point and compared metric of the first arm, in its order."""
    rows = []
    for name, point in arms[0].points.items():
        for metric in point.gate:
            found = decompose(arms, roles, name, metric)
            if found is not None:
                rows.append(found)
    return rows


def roles_of(arms: Sequence[ArmReport]) -> list[bool]:
    """Each arm's role from its identity: candidate (or unnamed) True, previous False."""
    return [arm.identity.get("role") != "previous" for arm in arms]
