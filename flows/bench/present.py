"""Presentation of comparisons: a rich table, recipe-style text lines and a PNG of the changes.

Kept apart from the statistics so the numbers can be tested without a console or matplotlib.
The text lines use the recipe's `bench.txt` layout so the two can be read side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from flows.bench.compare import Comparison, PointComparison
from flows.bench.report import ArmReport
from flows.bench.stats import Change, Described
from flows.bench.variance import Components

_STYLE = {"faster": "green", "level": "cyan", "slower": "bold red", "inconclusive": "yellow"}


def _decimals(metric: str) -> int:
    return 2 if metric.endswith("_ms") else (3 if metric.endswith("_s") else 1)


def _label(point: str) -> str:
    """Recipe labels: 'prose-c1' for decode points, '32768 tokens' for prefill points."""
    workload, _, name = point.partition("/")
    if workload == "prefill":
        return f"{name} tokens"
    return name if workload == "decode" else point


def recipe_line(
    label: str,
    new: Described,
    old: Described | None = None,
    *,
    change: Change | None = None,
    verdict: str | None = None,
    decimals: int = 1,
) -> str:
    """One line of the recipe's bench.txt, e.g.
    `  prose-c1                52.2 ± 0.7% n=3   ref     52.8   -1.2% [-13.5, +11.2] same`.
    """
    new = new.rounded()  # the recipe formats its stored, rounded summaries
    line = f"  {label:<18}{new.mean:>10.{decimals}f} ±{new.ci95_pct:4.1f}% n={new.n:<3}"
    if old is None or change is None:
        return line
    return (
        f"{line} ref {old.mean:>8.{decimals}f} {change.pct:>+6.1f}% "
        f"[{change.low:+.1f}, {change.high:+.1f}] {verdict}"
    )


def recipe_text(comparison: Comparison) -> str:
    """The comparison as recipe-style sections (throughput, step time, prefill)."""
    sections = {
        "decode (aggregate tok/s, 95% CI):": ("decode/", "tps"),
        "step time (ms, lower is better):": ("decode/", "step_ms"),
        "prefill (tok/s):": ("prefill/", "prefill_tps"),
    }
    grouped: dict[str, list[PointComparison]] = {}
    for r in comparison.points:
        title = next(
            (t for t, (prefix, metric) in sections.items()
             if r.point.startswith(prefix) and r.metric == metric),
            f"{r.metric} ({'higher' if r.higher_is_better else 'lower'} is better):",
        )  # fmt: skip
        grouped.setdefault(title, []).append(r)
    lines = []
    for title, rows in grouped.items():
        lines.append(title)
        for r in rows:
            verdict = r.recipe_verdict.value if r.recipe_verdict else None
            lines.append(
                recipe_line(
                    _label(r.point),
                    r.new,
                    r.old,
                    change=r.welch,
                    verdict=verdict,
                    decimals=_decimals(r.metric),
                )
            )
    return "\n".join(lines)


def _pct(value: float) -> str:
    """A percentage for a table cell; beyond +-999 % only the sign matters."""
    return f"{value:+.1f}" if abs(value) < 1000 else (">+999" if value > 0 else "<-999")


def _interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "-"
    return f"[{_pct(low)}, {_pct(high)}]"


def _row(r: PointComparison) -> list[str]:
    d = _decimals(r.metric)
    welch = r.welch
    arms = r.arms
    return [
        r.point,
        r.metric,
        f"{r.new.mean:.{d}f} ±{r.new.ci95_pct:.1f}% n={r.new.n}",
        f"{r.old.mean:.{d}f} ±{r.old.ci95_pct:.1f}% n={r.old.n}",
        f"{welch.pct:+.1f}% {_interval(welch.low, welch.high)}" if welch else "-",
        r.recipe_verdict.value if r.recipe_verdict else "-",
        f"{arms.change_pct:+.1f}% {_interval(arms.low_pct, arms.high_pct)}" if arms else "-",
        f"[{_STYLE[r.verdict.value]}]{r.verdict.value}[/]"
        if r.gated
        else f"[dim]{r.verdict.value} (reported)[/]",
    ]


def comparison_table(comparison: Comparison) -> Table:
    """A rich table: point, new, old, change [95 % interval], verdicts."""
    table = Table(
        title=(
            f"{', '.join(comparison.new)} vs {', '.join(comparison.old)} "
            f"(tolerance {comparison.tolerance_pct:g}%, ledger K={comparison.ledger_gaps})"
        )
    )
    for name in ("point", "metric", "new", "old", "Welch change [95%]", "recipe"):
        table.add_column(name)
    table.add_column("arms change [95%]")
    table.add_column("verdict")
    for r in comparison.points:
        table.add_row(*_row(r))
    return table


def _sd(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def variance_table(rows: Sequence[Components]) -> Table:
    """A rich table of noise components per point and metric (percent SD of one arm's mean)."""
    table = Table(title="noise per point: SD in % (df)")
    for name in ("point", "metric", "arms", "n/arm", "within", "arm means", "boot", "drift/arm"):
        table.add_column(name)
    for r in rows:
        table.add_row(
            r.point, r.metric, str(r.arms), f"{r.samples:g}",
            f"{r.within_sd_pct:.2f} ({r.within_df})",
            f"{_sd(r.arm_sd_pct)} ({r.boot_df})",
            _sd(r.boot_sd_pct),
            "-" if r.drift_pct_per_arm is None else f"{r.drift_pct_per_arm:+.2f}",
        )  # fmt: skip
    return table


def arm_table(arm: ArmReport) -> Table:
    """One arm: every point's gated metrics (mean, 95 % interval, n) and failures."""
    table = Table(title=f"{arm.label}: {arm.suite} at {arm.url} ({arm.started_utc})")
    for name in ("point", "metric", "mean", "±95%", "n", "median", "failed"):
        table.add_column(name, justify="left" if name in ("point", "metric") else "right")
    for name, point in arm.points.items():
        failed = sum(not r.ok for s in point.samples for r in s.receipts)
        for metric in point.gate:
            summary = point.summary(metric)
            if summary is None:
                table.add_row(name, metric, "-", "-", "0", "-", str(failed))
                continue
            d = _decimals(metric)
            table.add_row(
                name,
                metric,
                f"{summary.mean:.{d}f}",
                f"{summary.ci95_pct:.1f}%",
                str(summary.n),
                f"{summary.median:.{d}f}",
                str(failed),
            )
    return table


def plot_changes(comparison: Comparison, path: Path) -> Path:
    """A PNG of each row's change with its interval (arm-level if any, else Welch)."""
    import matplotlib as mpl  # noqa: PLC0415 - heavy; only loaded when plotting

    mpl.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    rows = comparison.points
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.5))
    for y, r in enumerate(rows):
        arms = r.arms
        if arms and arms.low_pct is not None and arms.high_pct is not None:
            center, low, high = arms.change_pct, arms.low_pct, arms.high_pct
        elif r.welch:
            center, low, high = r.welch.pct, r.welch.low, r.welch.high
        else:
            continue
        color = {"slower": "red", "faster": "green", "level": "tab:blue"}.get(
            r.verdict.value, "orange"
        )
        ax.errorbar(center, y, xerr=[[center - low], [high - center]], fmt="o", color=color)
    tol = comparison.tolerance_pct
    ax.axvline(0, color="black", linewidth=0.8)
    ax.axvspan(-tol, tol, color="grey", alpha=0.15, label=f"±{tol:g}% tolerance")
    ax.set_yticks(range(len(rows)), [f"{r.point} {r.metric}" for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("candidate change, % (95% interval: arm-level where decided, else Welch)")
    ax.set_title(
        f"{', '.join(comparison.new)} vs {', '.join(comparison.old)}", fontsize=9, loc="left"
    )
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
