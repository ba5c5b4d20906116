"""The benchmark gate's resolution on a cluster, said before a run and refused when too fine.

`qualify` (and `--plan`), `calibrate` and the benchmark stage's start say what the cluster's A/A
ledger lets the gate resolve on each gated point (`flows.bench.resolution`); `qualify` refuses a
tolerance the cluster cannot resolve within `max_arms` before anything starts (exit 2), naming
the file and key the tolerance came from and the two remedies with their cost. Without a ledger
there is nothing to forecast: the first qualification's C1/C2 gap (or `calibrate`) starts it.
"""

from __future__ import annotations

from pathlib import Path

from flows.bench.ledger import Ledger
from flows.bench.policy import suite_rules
from flows.bench.report import higher_is_better
from flows.bench.resolution import GatedRow, Resolution, RowResolution, forecast
from flows.errors import SpecError
from flows.spec.load import load_document, load_model
from flows.spec.release import BenchmarkGate
from flows.spec.suite import Suite, WorkloadGate
from flows.spec.suites import suite_file

# A ledger of two gaps (the demo's three-arm calibration) estimates the arm-to-arm SD with two
# degrees of freedom: its 90 % upper bound is about 2.2 times the estimate, and one noisy
# calibration would refuse a tolerance the cluster in fact resolves. Below this many gaps the
# forecast is said, never refused on.
GAPS_TO_REFUSE = 3


def gated_rows(settings: BenchmarkGate, suite: Suite, ledger: Ledger) -> list[GatedRow]:
    """The rows the gate will decide, as far as the ledger names the suite's points, each with
    its tolerance (`GatePolicy.tolerance_at`, as the comparison reads it) and its gaps."""
    policy = settings.policy().with_suite(suite_rules(suite.model_dump(mode="json")))
    workloads = {workload.name for workload in suite.workloads}
    keys = [name.rpartition(":") for name in ledger.gaps]
    compared = {metric for _, _, metric in keys}
    rows = []
    for point, _, metric in keys:
        if point.partition("/")[0] not in workloads or metric not in policy.gated_at(
            point, compared
        ):
            continue
        rows.append(
            GatedRow(
                point=point,
                metric=metric,
                higher_is_better=higher_is_better(metric),
                tolerance_pct=policy.tolerance_at(point, metric, 100 * settings.tolerance),
                gaps=tuple(ledger.for_metric(point, metric)),
            )
        )
    return rows


def cluster_resolution(
    settings: BenchmarkGate, suite: Suite, ledger: Ledger | None
) -> Resolution | None:
    """The forecast for these settings on this ledger (None: no ledger for the shape and suite)."""
    if ledger is None or not ledger.sessions:
        return None
    rows = gated_rows(settings, suite, ledger)
    if not rows:
        return None
    return forecast(rows, first_arms=len(settings.arms), max_arms=settings.max_arms)


def resolution_lines(resolution: Resolution | None, shape: str, suite: str) -> list[str]:
    """What a person reads before the run: per gated row, the half-width after the first arms
    and after max_arms against its tolerance."""
    if resolution is None:
        nothing = (
            f"no A/A ledger yet for {shape} and suite {suite}: the first qualification calibrates "
            "(its C1 and C2 start the ledger; `sparkgate calibrate` measures more at once)"
        )
        return [nothing]
    lines = []
    for row in resolution.rows:
        first, last = row.looks[0], row.last
        fits = (
            f"within it from {row.arms_needed} arms" if row.resolved and row.arms_needed
            else f"NOT within it by {resolution.max_arms} arms"
        )  # fmt: skip
        if not row.resolved and row.ledger_gaps < GAPS_TO_REFUSE:
            fits += f" by this estimate, too loose to refuse on below {GAPS_TO_REFUSE} gaps"
        lines.append(
            f"this cluster resolves ±{first.half_width_pct:.1f} % on {row.point} after "
            f"{first.arms} arms, ±{last.half_width_pct:.1f} % after {last.arms} "
            f"({row.metric}, tolerance {row.tolerance_pct:g} %: {fits}; arm-to-arm SD "
            f"{row.boot_sd_pct:.1f} % from {row.ledger_gaps} A/A gaps, up to "
            f"{row.boot_sd_high_pct:.1f} % at 90 % confidence)"
        )
    lines.extend(f"{row}: no A/A gap yet, not forecast" for row in resolution.unknown)
    return lines


def refusal(
    resolution: Resolution | None,
    release_file: Path,
    settings: BenchmarkGate,
    seconds_per_arm: float | None,
) -> SpecError | None:
    """The refusal of a tolerance the cluster cannot resolve within max_arms (None: it can)."""
    firm = [] if resolution is None else [
        row for row in resolution.unresolved if row.ledger_gaps >= GAPS_TO_REFUSE
    ]  # fmt: skip
    if resolution is None or not firm:
        return None
    row = max(firm, key=lambda r: r.last.half_width_pct - r.tolerance_pct)
    origin = tolerance_origin(release_file, settings, row.point, row.metric)
    message = (
        f"tolerance {row.tolerance_pct:g} % on {row.point} {row.metric} is finer than this "
        f"cluster resolves in max_arms {resolution.max_arms}: ±{row.last.half_width_pct:.1f} % "
        f"(arm-to-arm SD {row.boot_sd_pct:.1f} % over {row.ledger_gaps} A/A gaps), so even an "
        f"unchanged release would end inconclusive; {_remedies(row, resolution, seconds_per_arm)}"
    )
    return SpecError(message, file=origin[0], line=origin[1], key=origin[2])


def _remedies(row: RowResolution, resolution: Resolution, seconds_per_arm: float | None) -> str:
    """The two ways out and what each costs."""
    if row.arms_needed is None:
        arms = "no max_arms up to 40 resolves it"
    else:
        extra = row.arms_needed - resolution.max_arms
        minutes = max(1, round(extra * (seconds_per_arm or 0) / 60))
        unit = "minute" if minutes == 1 else "minutes"
        cost = f", about {minutes} more {unit} when undecided" if seconds_per_arm else ""
        arms = f"raise gates.benchmark.max_arms to {row.arms_needed} ({extra} more arms{cost})"
    return (
        f"either {arms}, or judge at a tolerance this cluster can prove: {row.provable_pct:.0f} % "
        f"or more (an unchanged release then passes by arm {resolution.max_arms} 9 times in 10)"
    )


def tolerance_origin(
    release_file: Path, settings: BenchmarkGate, point: str, metric: str
) -> tuple[Path, int, str]:
    """The file, line and key a row's tolerance came from, in `tolerance_at`'s order: the
    workload's per metric, the workload's, the suite's per metric, the release's per metric,
    the release's."""
    names = settings.suites()
    workload = point.partition("/")[0]
    suite_name, _, workload = workload.rpartition(":") if len(names) > 1 else ("", "", workload)
    file = suite_file(suite_name or names[0])
    suite = load_model(file, Suite)
    index = next((i for i, w in enumerate(suite.workloads) if w.name == workload), None)
    gate = suite.workloads[index].gate if index is not None else True
    loc: tuple[str | int, ...]
    if isinstance(gate, WorkloadGate) and metric in gate.tolerances:
        loc = ("workloads", index or 0, "gate", "tolerances", metric)
    elif isinstance(gate, WorkloadGate) and gate.tolerance is not None:
        loc = ("workloads", index or 0, "gate", "tolerance")
    elif metric in suite.tolerances:
        loc = ("tolerances", metric)
    else:
        file = release_file
        key = "tolerances" if metric in settings.tolerances else "tolerance"
        loc = ("gates", "benchmark", key, *((metric,) if key == "tolerances" else ()))
    origin = load_document(file).origin_of(loc)
    return origin.file, origin.line, ".".join(str(part) for part in loc)
