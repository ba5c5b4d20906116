"""What a qualification would do, stage by stage and node by node, touching nothing.

An operator reviews a qualification of the recipe before four Sparks spend an hour on it:
`sparkgate qualify RELEASE -c CLUSTER --plan` lists every command it would run on a node, every
container (or process) it would start, every cache it would empty and every HTTP endpoint it
would call, in flow order, from the spec files and the records alone. No node is contacted, no
lock taken, no build made: the image of a source build is named only after its build, so the
plan says so instead of guessing its tag.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flows.bench.stats import look_alpha
from flows.cluster.boot.caches import cache_targets
from flows.cluster.build.dockerfile import (
    build_argv,
    build_endpoint,
    builder_env,
    probe_builder,
    refusal,
    render_tag,
)
from flows.cluster.ops.lock import lock_settings
from flows.cluster.ops.preflight import node_values
from flows.cluster.runtime.factory import rank_spec, rank_view
from flows.errors import MissingPreviousError
from flows.gates.base import api_base_url
from flows.gates.benchmark.rules import session_looks
from flows.pipeline.previous import benchmarked_previous, compares_with_previous, missing_previous
from flows.record.reader import latest_record
from flows.spec.cluster import Cluster, DockerRuntime
from flows.spec.launch import LaunchPlan, render_all, spec_secrets
from flows.spec.release import BOOT_MODES, Release
from flows.spec.template import fill

CONTROLLER = "controller"
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class PlanStep(BaseModel):
    """One thing the qualification would do on one node (or on this machine, the controller)."""

    model_config = _FROZEN

    stage: str
    node: str
    action: str
    detail: dict[str, Any] = Field(default={}, description="argv, container options, URLs ...")


@dataclass(frozen=True)
class _Inputs:
    """What every section of the plan reads."""

    release_file: Path
    release: Release
    previous: Release | None
    cluster: Cluster
    plans: list[LaunchPlan]
    image: str
    experiments: Path


class QualificationPlan(BaseModel):
    """Every step of a qualification, in flow order."""

    model_config = _FROZEN

    release: str
    cluster: str
    shape: str
    steps: list[PlanStep]


def qualification_plan(
    release_file: Path,
    release: Release,
    previous: Release | None,
    cluster: Cluster,
    experiments: Path,
) -> QualificationPlan:
    """The plan of qualifying `release` on `cluster` (secrets redacted, nothing contacted)."""
    secrets = spec_secrets(cluster, release)
    plans = [plan.redacted(secrets) for plan in render_all(cluster, release)]
    given = _Inputs(release_file, release, previous, cluster, plans, _image(release), experiments)
    steps = [
        *_lock(cluster),
        *_preflight(cluster),
        *_build(release, cluster),
        *_distribute(given),
        *_ranks(given),
        *_release_tests(release, cluster),
        *_determinism(given),
        *_cold_boots(given),
        *_benchmark(given),
        PlanStep(
            stage="record", node=CONTROLLER, action="write the experiments record",
            detail={"folder": str(experiments / f"<date>-{release.name}")},
        ),
    ]  # fmt: skip
    return QualificationPlan(
        release=release.name, cluster=cluster.name, shape=cluster.shape, steps=steps
    )


def _image(release: Release) -> str:
    """The image the ranks would run, when the spec names it before the build."""
    if release.build.makes_image and release.build.image is not None:
        return release.build.image
    return "<named by the build stage>"


def _lock(cluster: Cluster) -> list[PlanStep]:
    settings = lock_settings(cluster)
    return [
        PlanStep(
            stage="lock", node=cluster.head.name, action="take the cluster lock",
            detail={"path": settings.path, "heartbeat_s": settings.heartbeat_s,
                    "stale_after_s": settings.stale_after_s, "needs": "flock"},
        )
    ]  # fmt: skip


def _preflight(cluster: Cluster) -> list[PlanStep]:
    steps = []
    for node in cluster.nodes:
        reads = ["true", "df (workdir and caches)", "cat /proc/meminfo", "date (clock offset)"]
        if node.head:
            reads.append("cat /proc/net/tcp /proc/net/tcp6 (ports free)")
        values = node_values(cluster, node)
        checks = [
            f"{check.name}: {shlex.join(fill(arg, values) for arg in check.argv)}"
            for check in cluster.preflight
        ]
        steps.append(
            PlanStep(
                stage="preflight", node=node.name, action="read facts and run checks",
                detail={"reads": reads, "custom_checks": checks,
                        "ports": [cluster.ports.api, cluster.ports.rendezvous]},
            )
        )  # fmt: skip
    return steps


def _build(release: Release, cluster: Cluster) -> list[PlanStep]:
    build = release.build
    if build.kind == "source":
        return [
            PlanStep(
                stage="build", node=CONTROLLER, action="build the engine wheel and wheelhouse",
                detail={"source": str(build.source), "dockerfile": build.dockerfile,
                        "args": sorted(build.args)},
            )
        ]  # fmt: skip
    if build.kind == "dockerfile":
        return _dockerfile_build(release, cluster)
    node = build.on or cluster.head.name
    if build.kind == "image":
        return [
            PlanStep(
                stage="build", node=node, action="adopt a prebuilt image from the node's daemon",
                detail={"image": build.image, "image_id": build.image_id or "(not pinned)"},
            )
        ]  # fmt: skip
    named = (
        {"image": build.image} if build.image is not None
        else {"image_file": build.image_file} if build.image_file is not None
        else {"image_line": build.image_line}
    )  # fmt: skip
    return [
        PlanStep(
            stage="build", node=node, action="run the release's build command",
            detail={"argv": build.command, "cwd": build.cwd, "timeout_s": build.timeout_s,
                    **named},
        )
    ]  # fmt: skip


def _dockerfile_build(release: Release, cluster: Cluster) -> list[PlanStep]:
    """The docker CLI command the build stage would run (builder probed; secrets redacted)."""
    build = release.build
    endpoint = build_endpoint(cluster, release)
    builder = probe_builder({"DOCKER_HOST": endpoint.base_url})
    policy = cluster.runtime.builds if isinstance(cluster.runtime, DockerRuntime) else None
    network = policy is not None and policy.network
    tag = render_tag(build.tag, release.name, datetime(2000, 1, 1, tzinfo=UTC)).replace(
        "20000101t000000", "<stamp>"
    )
    argv = build_argv(
        build, builder=builder, tag=tag, args=dict(build.args), network=network,
        iidfile="<iidfile>",
    )  # fmt: skip
    secrets = spec_secrets(cluster, release)
    detail: dict[str, Any] = {
        "argv": secrets.argv(argv),
        "env": builder_env(builder, endpoint.base_url),
        "builder": builder,
        "network": "allowed" if network else "none",
        "pull": "allowed" if policy is not None and policy.pull else "refused: bases must be local",
        "timeout_s": build.timeout_s,
    }
    problem = refusal(build, builder)
    if problem is not None:
        detail["refused"] = problem
    return [
        PlanStep(
            stage="build", node=endpoint.node, action="build the release's Dockerfile",
            detail=detail,
        )
    ]  # fmt: skip


def _distribute(given: _Inputs) -> list[PlanStep]:
    return [
        PlanStep(
            stage="distribute", node=node.name,
            action=f"put the release on the node ({given.cluster.runtime.kind} runtime)",
            detail={"release": given.image, "verify": "one image ID or build digest everywhere"},
        )
        for node in given.cluster.nodes
    ]  # fmt: skip


def _ranks(given: _Inputs) -> list[PlanStep]:
    """Every node's rank as it will be created: mounts, devices, environment, command."""
    return [
        PlanStep(
            stage="ranks", node=plan.node, action=f"rank {plan.rank} as the runtime creates it",
            detail=rank_view(given.cluster, given.release, plan, given.image),
        )
        for plan in given.plans
    ]  # fmt: skip


def _release_tests(release: Release, cluster: Cluster) -> list[PlanStep]:
    settings = release.gates.release_tests
    if not settings.enabled:
        return [_off("release_tests")]
    return [
        PlanStep(
            stage="release_tests", node=settings.node or cluster.head.name,
            action="run the classified release tests in the release (one node, ranks stopped)",
            detail={"classification": str(settings.classification),
                    "tests_root": cluster.engine.tests_root, "timeout_s": settings.timeout_s},
        )
    ]  # fmt: skip


def _boot(stage: str, given: _Inputs) -> list[PlanStep]:
    return [
        PlanStep(
            stage=stage, node=plan.node, action=f"start rank {plan.rank} of {given.release.name}",
            detail={**rank_spec(given.cluster, given.release, plan, given.image),
                    **({"ready_url": plan.ready_url} if plan.ready_url else {})},
        )
        for plan in given.plans
    ]  # fmt: skip


def _determinism(given: _Inputs) -> list[PlanStep]:
    release, previous, cluster = given.release, given.previous, given.cluster
    settings = release.gates.determinism
    if not settings.enabled:
        return [_off("determinism")]
    compared: dict[str, Any] = {"against_previous": False}
    if previous is not None and compares_with_previous(release, previous):
        problem = missing_previous(
            given.experiments, given.release_file, release, previous, cluster
        )
        found = latest_record(given.experiments, previous.name, shape=cluster.shape)
        compared = {
            "against_previous": True, "previous": previous.name, "shape": cluster.shape,
            "record": found.name if found is not None and problem is None else None,
            "refused": problem,
        }  # fmt: skip
    return [
        *_boot("determinism", given),
        PlanStep(
            stage="determinism", node=CONTROLLER,
            action="send temperature-0 requests in seven scenarios and hash the outputs",
            detail={"url": f"{api_base_url(cluster)}/v1/completions",
                    "prompts": len(settings.prompts) + 1, "max_tokens": settings.max_tokens,
                    "logprobs": settings.logprobs, **compared},
        ),
    ]  # fmt: skip


def _cold_boots(given: _Inputs) -> list[PlanStep]:
    settings = given.release.gates.cold_boots
    if not settings.enabled:
        return [_off("cold_boots")]
    steps = []
    for mode in (m for m in BOOT_MODES if m in settings.modes):
        targets = cache_targets(given.plans, mode, rank=settings.rank)
        steps.append(
            PlanStep(
                stage="cold_boots", node=CONTROLLER, action=f"boot {mode}",
                detail={"empty": [f"{t.node}:{t.path} ({t.kind})" for t in targets],
                        "then": "start every rank, watch the logs for compiles after the freeze"},
            )
        )  # fmt: skip
    return steps


def _benchmark(given: _Inputs) -> list[PlanStep]:
    release, cluster = given.release, given.cluster
    settings = release.gates.benchmark
    if not settings.enabled:
        return [_off("benchmark")]
    images = {"candidate": f"{release.name}: {given.image}"}
    try:
        previous = benchmarked_previous(
            given.experiments, given.release_file, release, given.previous, cluster
        )
    except MissingPreviousError as refused:
        previous, images["refused"] = given.previous, str(refused)
    if previous is not None and "refused" not in images:
        images["previous"] = f"{previous.name}: {_previous_image(previous)}"
    arms = [
        f"{arm} ({release.name if arm == 'candidate' else previous.name if previous else '?'})"
        for arm in settings.arms
    ]
    looks = session_looks(len(settings.arms), settings.max_arms)
    return [
        PlanStep(
            stage="benchmark", node=CONTROLLER,
            action="boot and measure arms in turn, one session",
            detail={"arms": arms, "images": images, "max_arms": settings.max_arms,
                    "looks": f"{looks}, each decided at {100 * look_alpha(looks):.2f} % two-sided "
                             "(Pocock); slower also at that over the gated points",
                    "suite": settings.suite,
                    "url": f"{api_base_url(cluster)}/v1/completions",
                    "metrics": f"{api_base_url(cluster)}/metrics"},
        )
    ]  # fmt: skip


def _previous_image(previous: Release) -> str:
    """What the previous arms boot: a pinned image ID, an adopted tag, or a source build."""
    build = previous.build
    if not build.makes_image:
        return "built from its source (content-addressed: the same tree, the same build)"
    if build.image_id is not None:
        return f"{build.image} {build.image_id} (pinned)"
    return f"{build.image} (adopted as its release file names it)"


def _off(stage: str) -> PlanStep:
    return PlanStep(stage=stage, node=CONTROLLER, action="skipped (enabled: false)")
