"""What the release-tests gate would do (`sparkgate qualify --plan`): one node, ranks stopped."""

from __future__ import annotations

from flows.gates.plan import PlanContext, PlanStep, skipped
from flows.gates.release_tests.checkout import checkout_path
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
            detail={"classification": _classification(given),
                    "tests_root": cluster.engine.tests_root, "timeout_s": settings.timeout_s,
                    "pytest_options": list(settings.pytest_options)},
        )
    ]  # fmt: skip


def _classification(given: PlanContext) -> str:
    """The release's file, or the head's file in the operator's checkout."""
    settings, cluster = given.release.gates.release_tests, given.cluster
    remote = checkout_path(cluster, settings)
    if remote is None:
        return str(settings.classification)
    return f"{cluster.head.name}:{remote} (the operator's checkout, read at the run)"
