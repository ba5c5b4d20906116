"""What the determinism gate would do (`sparkgate qualify --plan`): boot, seven scenarios, hashes,
and which previous record it would compare with on this shape (or why it would refuse)."""

from __future__ import annotations

from typing import Any

from flows.gates.base import api_base_url
from flows.gates.determinism.rules import NAME
from flows.gates.plan import CONTROLLER, PlanContext, PlanStep, boot_steps, skipped


def plan_steps(given: PlanContext) -> list[PlanStep]:
    """Boot the candidate, then the scenarios from the controller."""
    release, previous, cluster = given.release, given.previous, given.cluster
    settings = release.gates.determinism
    if not settings.enabled:
        return [skipped(NAME)]
    compared: dict[str, Any] = {"against_previous": False}
    if previous is not None and settings.against_previous:
        history = given.history
        compared = {
            "against_previous": True, "previous": previous.name, "shape": cluster.shape,
            "record": history.outputs_record, "refused": history.outputs_refused,
        }  # fmt: skip
    return [
        *boot_steps(NAME, given),
        PlanStep(
            stage=NAME, node=CONTROLLER,
            action="send temperature-0 requests in seven scenarios and hash the outputs",
            detail={"url": f"{api_base_url(cluster)}/v1/completions",
                    "prompts": len(settings.prompts) + 1, "max_tokens": settings.max_tokens,
                    "logprobs": settings.logprobs, **compared},
        ),
    ]  # fmt: skip
