"""The cold-boots gate's rules: what one boot shows, its row, and the verdict (pure).

Kept apart from the boots so every rule is unit-tested on hand-made observations and `verify`
rebuilds each row of a record from its raw boot file with the same code.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from flows.cluster.boot.timeline import BootTimeline
from flows.errors import boot_failure_reason
from flows.gates.cold_boots.summary import BootRow, RankFigures, SpotCheck
from flows.gates.outputs import shown_names

NAME = "cold_boots"


def rank_figures(timeline: BootTimeline) -> list[RankFigures]:
    """Each rank's preparation figures from a boot timeline (the gate and `verify` alike)."""
    return [
        RankFigures(
            rank=r.rank,
            node=r.node,
            prepare_s=r.prepare_s,
            kernels=r.kernels,
            compiled=r.compiled,
            cached=r.cached,
            liveness_wait_s=r.liveness_wait_s,
        )
        for r in timeline.ranks
    ]


class BootObservation(BaseModel):
    """Everything seen during one cold-boot mode, before any judgement."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: str
    emptied_ranks: list[int] = Field(default=[], description="Ranks whose kernel cache emptied.")
    ready_s: float | None = None
    ranks: list[RankFigures] = []
    compiles_logged: int = Field(default=0, description="Compiles after preparation, all logs.")
    compile_lines: list[str] = Field(default=[], description="What compiled (family/key).")
    compiles_metric: float | None = Field(default=None, description="Metric value, if exported.")
    spot_check: SpotCheck = "not run"
    spot_differing: list[str] = []
    error: str | None = Field(default=None, description="Why the boot or its traffic failed.")


def boot_problems(seen: BootObservation) -> list[str]:
    """Why this boot fails the gate (empty: it passes)."""
    if seen.error is not None:
        return [boot_failure_reason("boot failed", seen.error)]
    problems: list[str] = []
    if seen.compiles_logged:
        what = f" ({shown_names(seen.compile_lines)})" if seen.compile_lines else ""
        problems.append(f"{seen.compiles_logged} compiles after preparation in the logs{what}")
    if seen.compiles_metric:
        problems.append(f"compiles metric reads {seen.compiles_metric:g}")
    if seen.spot_check != "identical":
        problems.append(
            f"spot check {seen.spot_check} against the reference"
            + (f" ({shown_names(seen.spot_differing)})" if seen.spot_differing else "")
        )
    by_rank = {figures.rank: figures for figures in seen.ranks}
    for rank in seen.emptied_ranks:
        figures = by_rank.get(rank)
        if figures is not None and figures.compiled == 0:
            problems.append(f"rank {rank} compiled nothing though its kernel cache was emptied")
    return problems


def what_happened(seen: BootObservation) -> str:
    """The recipe's `what happened` column: preparation, waits, and any problem."""
    problems = boot_problems(seen)
    if seen.error is not None:
        return problems[0]
    parts = []
    for figures in seen.ranks:
        if figures.compiled:
            parts.append(
                f"rank {figures.rank} compiled {figures.compiled} kernels "
                f"in {_seconds(figures.prepare_s)}"
            )
    if not parts:
        kernels = sorted({f.kernels for f in seen.ranks if f.kernels is not None})
        shown = "/".join(str(k) for k in kernels) or "its"
        parts.append(f"every rank loaded {shown} kernels from the cache")
    waits = [f for f in seen.ranks if f.liveness_wait_s and f.liveness_wait_s >= 1.0]
    parts.extend(f"rank {f.rank} waited {_seconds(f.liveness_wait_s)} on liveness" for f in waits)
    parts.extend(problems or ["nothing compiled after preparation", "spot check identical"])
    return "; ".join(parts)


def boot_row(seen: BootObservation) -> BootRow:
    """One row of the record's boots table (the summary keys the record renders)."""
    figures = seen.ranks
    return BootRow(
        mode=seen.mode,
        ready_s=seen.ready_s,
        prepare_s_max=_max([f.prepare_s for f in figures]),
        kernels=_sum([f.kernels for f in figures]),
        compiled=_sum([f.compiled for f in figures]),
        cached=_sum([f.cached for f in figures]),
        liveness_wait_s_max=_max([f.liveness_wait_s for f in figures]),
        compiles_after_preparation=seen.compiles_logged,
        compiles_metric=seen.compiles_metric,
        spot_check=seen.spot_check,
        what_happened=what_happened(seen),
        passed=not boot_problems(seen),
        ranks=list(figures),
        error=seen.error,
    )


def cold_boots_verdict(observations: Sequence[BootObservation]) -> tuple[bool, str]:
    """Pass when every mode booted, compiled nothing after preparation and matched the reference."""
    failed = [(seen.mode, boot_problems(seen)) for seen in observations]
    failed = [(mode, problems) for mode, problems in failed if problems]
    if failed:
        return False, "; ".join(f"{mode}: {', '.join(problems)}" for mode, problems in failed)
    readies = ", ".join(f"{seen.mode} {_seconds(seen.ready_s)}" for seen in observations)
    return True, f"every boot ready with nothing compiled after preparation ({readies})"


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f} s"


def _max(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _sum(values: Sequence[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None
