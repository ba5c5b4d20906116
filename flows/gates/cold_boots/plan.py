"""What the cold-boots gate would do (`sparkgate qualify --plan`): the caches each boot empties."""

from __future__ import annotations

from flows.cluster.boot.caches import cache_targets
from flows.gates.cold_boots.rules import NAME
from flows.gates.plan import CONTROLLER, PlanContext, PlanStep, skipped
from flows.spec.release import BOOT_MODES


def plan_steps(given: PlanContext) -> list[PlanStep]:
    """One boot per mode, in the gate's order, with the caches it empties first."""
    settings = given.release.gates.cold_boots
    if not settings.enabled:
        return [skipped(NAME)]
    steps = []
    for mode in (m for m in BOOT_MODES if m in settings.modes):
        targets = cache_targets(given.plans, mode, rank=settings.rank)
        steps.append(
            PlanStep(
                stage=NAME, node=CONTROLLER, action=f"boot {mode}",
                detail={"empty": [f"{t.node}:{t.path} ({t.kind})" for t in targets],
                        "then": "start every rank, watch the logs for compiles after the freeze"},
            )
        )  # fmt: skip
    return steps
