"""What the benchmark gate would do (`sparkgate qualify --plan`): arms, images, looks, endpoints."""

from __future__ import annotations

from flows.bench.stats import look_alpha
from flows.gates.base import api_base_url
from flows.gates.benchmark.cross_rules import RULE
from flows.gates.benchmark.rules import NAME, session_looks
from flows.gates.plan import CONTROLLER, PlanContext, PlanStep, skipped
from flows.spec.release import Release


def plan_steps(given: PlanContext) -> list[PlanStep]:
    """One session: arms in turn, each booted and measured from the controller."""
    release, cluster = given.release, given.cluster
    settings = release.gates.benchmark
    if not settings.enabled:
        return [skipped(NAME)]
    if any(not layer.reversible for layer in release.host):
        return [_across_sessions(given)]
    images = {"candidate": f"{release.name}: {given.image}"}
    previous = given.history.benchmarked
    if given.history.benchmark_refused is not None:
        previous, images["refused"] = given.previous, given.history.benchmark_refused
    elif previous is not None:
        images["previous"] = f"{previous.name}: {_previous_image(previous)}"
    arms = [
        f"{arm} ({release.name if arm == 'candidate' else previous.name if previous else '?'})"
        for arm in settings.arms
    ]
    looks = session_looks(len(settings.arms), settings.max_arms)
    return [
        PlanStep(
            stage=NAME, node=CONTROLLER,
            action="boot and measure arms in turn, one session",
            detail={"arms": arms, "images": images, "max_arms": settings.max_arms,
                    "looks": f"{looks}, each decided at {100 * look_alpha(looks):.2f} % two-sided "
                             "(Pocock); slower also at that over the gated points",
                    "suite": settings.suite,
                    "url": f"{api_base_url(cluster)}/v1/completions",
                    "metrics": f"{api_base_url(cluster)}/metrics"},
        )
    ]  # fmt: skip


def _across_sessions(given: PlanContext) -> PlanStep:
    """An irreversible host change: candidate arms only, compared with the previous release's
    recorded arms by the cross-session rule."""
    release, settings = given.release, given.release.gates.benchmark
    previous = given.previous.name if given.previous else "?"
    first = [f"candidate ({release.name})" for arm in settings.arms if arm == "candidate"]
    return PlanStep(
        stage=NAME, node=CONTROLLER,
        action="boot and measure candidate arms on the changed hosts; compare across sessions",
        detail={"arms": first, "max_arms": settings.max_arms,
                "compared with": f"{previous}'s arms of its newest published record on "
                                 f"{given.cluster.shape}",
                "rule": f"{RULE}: {settings.cross_session_allowance_pct:g} % on each side",
                "suite": settings.suite,
                "url": f"{api_base_url(given.cluster)}/v1/completions"},
    )  # fmt: skip


def _previous_image(previous: Release) -> str:
    """What the previous arms boot: a pinned image ID, an adopted tag, or a source build."""
    build = previous.build
    if not build.makes_image:
        return "built from its source (content-addressed: the same tree, the same build)"
    if build.image_id is not None:
        return f"{build.image} {build.image_id} (pinned)"
    return f"{build.image} (adopted as its release file names it)"
