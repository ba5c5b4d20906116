"""What the release-tests gate would do (`sparkgate qualify --plan`): one node, ranks stopped."""

from __future__ import annotations

from flows.gates.plan import PlanContext, PlanStep, skipped
from flows.gates.release_tests.rules import NAME


def plan_steps(given: PlanContext) -> list[PlanStep]:
    """Run the classified release tests on one node."""
    settings, cluster = given.release.gates.release_tests, given.cluster
    if not settings.enabled:
        return [skipped(NAME)]
    return [
        PlanStep(
            stage=NAME, node=settings.node or cluster.head.name,
            action="run the classified release tests in the release (one node, ranks stopped)",
            detail={"classification": str(settings.classification),
                    "tests_root": cluster.engine.tests_root, "timeout_s": settings.timeout_s},
        )
    ]  # fmt: skip
