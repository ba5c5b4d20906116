"""The benchmark suite spec (kind: suite): which workloads one arm runs, and how hard.

A suite is the same in every arm of a session, so its seed fixes the prompts and the Poisson
schedule (common random numbers across arms). Every workload sends distinct prompts, each with
a unique prefix where the point must be cold. Sizes differ per machine: `release-local` fits in
about two minutes on a laptop-class CPU; `release-tp3`/`release-tp4` use the recipe's sizes.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from flows.errors import SpecError
from flows.spec.base import Problem, SpecContext, SpecModel, SpecPath
from flows.spec.gate_policy import KNOWN_METRICS


class WorkloadGate(SpecModel):
    """Which metrics of a workload's points decide the gate, and at what tolerance.

    The suite knows which of its points are steady enough to gate (a Poisson point moved
    17-21 % between the recipe's own runs); the release's `gates.benchmark` settings decide
    every point whose workload says nothing. For a workload that says something, the suite wins.
    """

    metrics: list[str] | None = Field(
        default=None,
        min_length=1,
        description="Metrics that gate on this workload's points (default: the release's).",
    )
    tolerance: float | None = Field(
        default=None, gt=0, lt=1, description="Allowed slowdown on these points (default: release)."
    )
    tolerances: dict[str, Annotated[float, Field(gt=0, lt=1)]] = Field(
        default_factory=dict,
        description="Allowed slowdown on these points per metric (wins over `tolerance`).",
    )


class _Workload(SpecModel):
    """Fields every workload has."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9_-]*$", description="Point prefix.")
    samples: int | None = Field(
        default=None, ge=1, description="Samples per point (suite default)."
    )
    warmup: int | None = Field(
        default=None,
        ge=0,
        description="Discarded samples per point before those (suite default); 0 where an "
        "earlier workload of the arm already warmed the same path.",
    )
    max_tokens: int = Field(default=64, ge=1, description="Output tokens per request (ignore_eos).")
    temperature: float | None = Field(
        default=None,
        ge=0,
        le=2,
        description=(
            "Sampling temperature of this workload (default: the suite's). Above 0 every "
            "request carries a seed from the suite's, so arms send the same requests; such "
            "points measure speed (and draft acceptance), never determinism."
        ),
    )
    top_p: float | None = Field(
        default=None, gt=0, le=1, description="Nucleus sampling (sent only when set)."
    )
    gate: bool | WorkloadGate = Field(
        default=True,
        description=(
            "Whether this workload's points decide the gate: true (the release's settings), "
            "false (reported only), or {metrics, tolerance} for these points."
        ),
    )


class SingleStream(_Workload):
    """One request at a time on distinct prompts: TTFT p50, time per output token p50, tok/s."""

    kind: Literal["single_stream"] = Field(description="single_stream")
    requests: int = Field(default=4, ge=1, description="Distinct prompts per sample.")
    prompt_tokens: int = Field(default=256, ge=1, description="Prompt length in tokens.")


class ClosedLoop(_Workload):
    """N distinct streams at once; aggregate tok/s over the first-to-last token window."""

    kind: Literal["closed_loop"] = Field(description="closed_loop")
    concurrency: list[int] = Field(min_length=1, description="Stream counts, one point each.")
    prompt_tokens: int = Field(default=256, ge=1, description="Prompt length in tokens.")


class Poisson(_Workload):
    """Poisson arrivals at a fixed rate from a seeded schedule identical in every arm."""

    kind: Literal["poisson"] = Field(description="poisson")
    rate: float = Field(gt=0, description="Requests per second.")
    requests: int = Field(default=16, ge=2, description="Requests per sample.")
    prompt_tokens: int = Field(default=256, ge=1, description="Prompt length in tokens.")


class Prefill(_Workload):
    """Cold prompts of exact token length from real source text; prefill tok/s = tokens/TTFT."""

    kind: Literal["prefill"] = Field(description="prefill")
    depths: list[int] = Field(min_length=1, description="Prompt lengths in tokens, one point each.")
    max_tokens: int = Field(default=1, ge=1, description="Output tokens (1: prefill only).")


class StepGrid(_Workload):
    """Decode step time at shapes (streams x context), summarized as a geometric mean."""

    kind: Literal["step_grid"] = Field(description="step_grid")
    concurrency: list[int] = Field(min_length=1, description="Stream counts of the grid.")
    context: list[int] = Field(min_length=1, description="Prompt lengths of the grid (tokens).")


class Prefix(_Workload):
    """The same long prompt cold, then warm: TTFT of both and the warm hit rate."""

    kind: Literal["prefix"] = Field(description="prefix")
    prompt_tokens: int = Field(default=2048, ge=16, description="Prompt length in tokens.")
    warm_replays: int = Field(default=2, ge=1, description="Identical warm replays per sample.")
    max_tokens: int = Field(default=1, ge=1, description="Output tokens per request.")


class SessionReplay(_Workload):
    """A recorded session (`sparkgate bench record`) replayed turn by turn: per-turn prompt and
    cached tokens, TTFT, prefill and decode speed; mean TTFT and time per output token compared."""

    kind: Literal["session"] = Field(description="session")
    file: SpecPath = Field(description="The session file (JSON Lines), relative to this file.")
    pace: Literal["back_to_back", "recorded"] = Field(
        default="back_to_back",
        description="Send each turn when the previous ends, or after the recorded idle gap.",
    )
    max_gap_s: float = Field(default=60.0, ge=0, description="Longest recorded gap waited.")
    turns: int | None = Field(default=None, ge=1, description="Replay only the first N turns.")
    max_tokens: int = Field(
        default=64, ge=1, description="Output tokens of a turn whose recording says none."
    )


Workload = Annotated[
    SingleStream | ClosedLoop | Poisson | Prefill | StepGrid | Prefix | SessionReplay,
    Field(discriminator="kind"),
]


class Idle(SpecModel):
    """Sample integrity: wait for an idle engine, repeat samples that saw foreign traffic."""

    timeout_s: float = Field(default=60.0, gt=0, description="Longest wait for running=waiting=0.")
    retries: int = Field(default=3, ge=0, description="Repeats of a sample with foreign traffic.")


class Client(SpecModel):
    """The load generator's settings."""

    processes: int = Field(default=1, ge=1, le=64, description="Client processes per batch.")
    max_processes: int = Field(
        default=4, ge=1, le=64, description="Most processes when a saturated client is scaled out."
    )
    max_cpu_share: float = Field(
        default=0.5, ge=0, le=1, description="CPU share of a process above which it is saturated."
    )
    timeout_s: float = Field(default=600.0, gt=0, description="Longest silence on a stream.")


class Suite(SpecModel):
    """A benchmark suite: workloads, samples per point, warm-up and sample integrity."""

    kind: Literal["suite"] = Field(default="suite", description="Always `suite`.")
    name: str = Field(min_length=1, description="Suite name, e.g. release-local.")
    description: str = Field(default="", description="What the suite is for.")
    seed: int = Field(default=0, ge=0, description="Seed of prompts and schedules (same in arms).")
    samples: int = Field(default=3, ge=1, description="Samples per point.")
    warmup: int = Field(default=1, ge=0, description="Discarded samples per point before those.")
    model: str | None = Field(default=None, description="Model name; default: the served one.")
    temperature: float = Field(default=0.0, ge=0, le=2, description="Sampling temperature.")
    idle: Idle = Field(default=Idle(), description="Idle check and foreign-traffic repeats.")
    client: Client = Field(default=Client(), description="Load generator settings.")
    tolerances: dict[str, Annotated[float, Field(gt=0, lt=1)]] = Field(
        default_factory=dict,
        description=(
            "Allowed slowdown per metric on every workload of this suite, e.g. {engine_cpu_ms: "
            "0.15}: the cluster's, set from its A/A noise. A workload's `gate: {tolerance}` wins "
            "on its points; these win over the release's `tolerance` and `tolerances`."
        ),
    )
    workloads: list[Workload] = Field(min_length=1, description="Workloads, run in this order.")

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """Names and stream counts are unique, gate metrics known, and something gates."""
        del context
        seen: set[str] = set()
        found = _gate_problems(self.workloads)
        known = ", ".join(sorted(KNOWN_METRICS))
        for metric in self.tolerances:
            if metric not in KNOWN_METRICS:
                found.append(Problem(("tolerances", metric), f"unknown metric {metric!r}", known))
        for index, workload in enumerate(self.workloads):
            if workload.name in seen:
                found.append(
                    Problem(("workloads", index, "name"), f"duplicate {workload.name!r}", "unique")
                )
            seen.add(workload.name)
            counts = getattr(workload, "concurrency", [])
            if any(c < 1 for c in counts) or len(set(counts)) != len(counts):
                where = ("workloads", index, "concurrency")
                found.append(Problem(where, "must be unique positive counts", "e.g. [1, 2, 4]"))
        return found

    def gated_only(self) -> Suite:
        """The suite without its reported-only workloads (`gate: false`): what a calibration
        measures when only the noise of what decides is wanted. Same name, so its gaps pool
        with the full suite's in the ledger; validation guarantees one workload is left."""
        gating = [w for w in self.workloads if w.gate is not False]
        return self.model_copy(update={"workloads": gating})

    def samples_of(self, workload: _Workload) -> int:
        """Samples per point of a workload (its own setting, else the suite's)."""
        return workload.samples or self.samples

    def warmup_of(self, workload: _Workload) -> int:
        """Discarded samples per point of a workload (its own setting, else the suite's)."""
        return self.warmup if workload.warmup is None else workload.warmup

    def temperature_of(self, workload: _Workload) -> float:
        """Sampling temperature of a workload (its own setting, else the suite's)."""
        return self.temperature if workload.temperature is None else workload.temperature


def _gate_problems(workloads: list[Workload]) -> list[Problem]:
    """Gate metrics must be ones sparkgate compares, and at least one workload must gate.

    A suite whose every workload is reported-only would let any release through, so it is
    refused when loaded.
    """
    found = []
    known = ", ".join(sorted(KNOWN_METRICS))
    for index, workload in enumerate(workloads):
        gate = workload.gate
        if not isinstance(gate, WorkloadGate):
            continue
        for metric in gate.metrics or []:
            if metric not in KNOWN_METRICS:
                where: tuple[str | int, ...] = ("workloads", index, "gate", "metrics")
                found.append(Problem(where, f"unknown metric {metric!r}", known))
        for metric in gate.tolerances:
            if metric not in KNOWN_METRICS:
                where = ("workloads", index, "gate", "tolerances", metric)
                found.append(Problem(where, f"unknown metric {metric!r}", known))
    if workloads and all(w.gate is False for w in workloads):
        found.append(
            Problem(("workloads",), "no workload gates", "at least one without gate: false")
        )
    return found


def with_suite_tolerances(
    gate: bool | WorkloadGate, tolerances: dict[str, float]
) -> bool | WorkloadGate:
    """A workload's gate carrying its suite's per-metric tolerances, as `tolerance_at` ranks
    them (the workload's own first), so a combined suite keeps each suite's tolerances apart."""
    if gate is False or not tolerances:
        return gate
    if gate is True:
        return WorkloadGate(tolerances=dict(tolerances))
    if gate.tolerance is not None:
        return gate
    return gate.model_copy(update={"tolerances": {**tolerances, **gate.tolerances}})


def combine(suites: list[Suite]) -> Suite:
    """Several suites as the one suite an arm runs: each workload named `<suite>:<workload>`.

    A gate that names one suite runs it as it is (its point names are unchanged). With several,
    every arm runs each suite in the order given, and point names carry the suite's name, so
    `release-tp4:single/c1` and `single-stream:single/c1` never meet. Each workload keeps its
    own suite's samples and temperature; the arm uses the first suite's seed, idle check and
    client settings and the largest warm-up of them all.

    Raises:
        SpecError: when two suites have the same name or name different models.
    """
    if len(suites) == 1:
        return suites[0]
    names = [suite.name for suite in suites]
    if len(set(names)) != len(names):
        raise SpecError(f"benchmark suites named twice: {', '.join(names)}")
    models = {suite.model for suite in suites}
    if len(models) > 1:
        raise SpecError(
            f"suites {', '.join(names)} name different models: {sorted(map(str, models))}"
        )
    workloads = [
        workload.model_copy(
            update={
                "name": f"{suite.name}:{workload.name}",
                "samples": suite.samples_of(workload),
                "warmup": suite.warmup_of(workload),
                "temperature": suite.temperature_of(workload),
                "gate": with_suite_tolerances(workload.gate, suite.tolerances),
            }
        )
        for suite in suites
        for workload in suite.workloads
    ]
    first = suites[0]
    return first.model_copy(
        update={
            "name": "+".join(names),
            "description": "; ".join(f"{s.name}: {s.description}" for s in suites),
            "warmup": max(suite.warmup for suite in suites),
            "tolerances": {},  # each suite's went into its own workloads' gate
            "workloads": workloads,
        }
    )
