"""What a qualification would do, as data: the steps of `sparkgate qualify --plan`, and what each
gate's plan steps read.

Every gate says itself what it would do on which node (`Gate.plan`), from the specs and from
what the records say about the previous release, which the pipeline looks up and hands over
(`PreviousPlan`): gates never read records. Nothing here contacts a node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flows.cluster.runtime.factory import rank_spec
from flows.spec.cluster import Cluster
from flows.spec.launch import LaunchPlan
from flows.spec.release import Release

CONTROLLER = "controller"


class PlanStep(BaseModel):
    """One thing the qualification would do on one node (or on this machine, the controller)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: str
    node: str
    action: str
    detail: dict[str, Any] = Field(default={}, description="argv, container options, URLs ...")


@dataclass(frozen=True)
class PreviousPlan:
    """What the records say of the previous release, as the plan shows it."""

    outputs_record: str | None
    """The record whose hashes the determinism gate would compare with (None: none usable)."""
    outputs_refused: str | None
    """Why the comparison with the previous release's outputs cannot run (None: it can)."""
    benchmarked: Release | None
    """The previous release as the benchmark's previous arms would boot it."""
    benchmark_refused: str | None
    """Why the benchmark cannot boot the previous release as qualified (None: it can)."""


@dataclass(frozen=True)
class PlanContext:
    """What every gate's plan steps read: specs, rendered launch plans, the image, the records."""

    release: Release
    previous: Release | None
    cluster: Cluster
    plans: list[LaunchPlan]
    image: str
    history: PreviousPlan


def skipped(stage: str) -> PlanStep:
    """The step of a gate the release turns off."""
    return PlanStep(stage=stage, node=CONTROLLER, action="skipped (enabled: false)")


def boot_steps(stage: str, given: PlanContext) -> list[PlanStep]:
    """Starting every rank of the candidate, as the runtime would (a gate that boots it)."""
    return [
        PlanStep(
            stage=stage, node=plan.node, action=f"start rank {plan.rank} of {given.release.name}",
            detail={**rank_spec(given.cluster, given.release, plan, given.image),
                    **({"ready_url": plan.ready_url} if plan.ready_url else {})},
        )
        for plan in given.plans
    ]  # fmt: skip
