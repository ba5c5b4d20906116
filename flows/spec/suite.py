"""The benchmark suite spec (kind: suite): which workloads one arm runs, and how hard.

A suite is the same in every arm of a session, so its seed fixes the prompts and the Poisson
schedule (common random numbers across arms). Every workload sends distinct prompts, each with
a unique prefix where the point must be cold. Sizes differ per machine: `release-local` fits in
about two minutes on a laptop-class CPU; `release-tp3`/`release-tp4` use the recipe's sizes.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from flows.spec.base import Problem, SpecContext, SpecModel


class _Workload(SpecModel):
    """Fields every workload has."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9_-]*$", description="Point prefix.")
    samples: int | None = Field(
        default=None, ge=1, description="Samples per point (suite default)."
    )
    max_tokens: int = Field(default=64, ge=1, description="Output tokens per request (ignore_eos).")


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


Workload = Annotated[
    SingleStream | ClosedLoop | Poisson | Prefill | StepGrid | Prefix,
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
    workloads: list[Workload] = Field(min_length=1, description="Workloads, run in this order.")

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """Workload names are unique (they prefix point names); stream counts too."""
        del context
        seen: set[str] = set()
        found = []
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

    def samples_of(self, workload: _Workload) -> int:
        """Samples per point of a workload (its own setting, else the suite's)."""
        return workload.samples or self.samples
