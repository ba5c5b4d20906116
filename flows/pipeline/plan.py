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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

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
from flows.cluster.runtime.factory import rank_view
from flows.errors import MissingPreviousError
from flows.gates.plan import CONTROLLER, PlanContext, PlanStep, PreviousPlan
from flows.gates.registry import REGISTRY
from flows.pipeline.inputs import QualificationInputs
from flows.pipeline.previous import benchmarked_previous, compares_with_previous, missing_previous
from flows.record.reader import latest_record
from flows.spec.cluster import Cluster, DockerRuntime
from flows.spec.launch import render_all, spec_secrets
from flows.spec.release import Release
from flows.spec.template import fill

_FROZEN = ConfigDict(frozen=True, extra="forbid")
__all__ = ["PlanStep", "QualificationPlan", "qualification_plan"]


class QualificationPlan(BaseModel):
    """Every step of a qualification, in flow order."""

    model_config = _FROZEN

    release: str
    cluster: str
    shape: str
    steps: list[PlanStep]


def qualification_plan(inputs: QualificationInputs, experiments: Path) -> QualificationPlan:
    """The plan of qualifying the release on the cluster (secrets redacted, nothing contacted)."""
    release, previous, cluster = inputs.release, inputs.previous, inputs.cluster
    release_file = inputs.release_file
    secrets = spec_secrets(cluster, release)
    plans = [plan.redacted(secrets) for plan in render_all(cluster, release)]
    history = _previous_plan(experiments, release_file, release, previous, cluster)
    image = _image(release)
    given = PlanContext(release, previous, cluster, plans, image, history)
    steps = [
        *_lock(cluster),
        *_preflight(cluster),
        *_build(release, cluster),
        *_distribute(cluster, image),
        *_host(release, cluster),
        *_ranks(given),
        *(step for gate in REGISTRY for step in gate.plan(given)),
        PlanStep(
            stage="record", node=CONTROLLER, action="write the experiments record",
            detail={"folder": str(experiments / f"<date>-{release.name}")},
        ),
    ]  # fmt: skip
    shown = [step.model_copy(update={"detail": secrets.spec(step.detail)}) for step in steps]
    return QualificationPlan(
        release=release.name, cluster=cluster.name, shape=cluster.shape, steps=shown
    )


def _previous_plan(
    experiments: Path,
    release_file: Path,
    release: Release,
    previous: Release | None,
    cluster: Cluster,
) -> PreviousPlan:
    """What the records say of the previous release: the record the determinism gate would
    compare with (or why it cannot) and the release the benchmark's previous arms would boot."""
    refused = missing_previous(experiments, release_file, release, previous, cluster)
    found = (
        latest_record(experiments, previous.name, shape=cluster.shape)
        if previous is not None and compares_with_previous(release, previous)
        else None
    )
    try:
        benchmarked = benchmarked_previous(experiments, release_file, release, previous, cluster)
        benchmark_refused = None
    except MissingPreviousError as error:
        benchmarked, benchmark_refused = previous, str(error)
    return PreviousPlan(
        outputs_record=found.name if found is not None and refused is None else None,
        outputs_refused=refused,
        benchmarked=benchmarked,
        benchmark_refused=benchmark_refused,
    )


def _ranks(given: PlanContext) -> list[PlanStep]:
    """Every node's rank as it will be created: mounts, devices, environment, command."""
    return [
        PlanStep(
            stage="ranks", node=plan.node, action=f"rank {plan.rank} as the runtime creates it",
            detail=rank_view(given.cluster, given.release, plan, given.image),
        )
        for plan in given.plans
    ]  # fmt: skip


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


def _host(release: Release, cluster: Cluster) -> list[PlanStep]:
    """The release's host layers on every node: reverted, then applied for the gates and the
    candidate's arms, reverted for the previous release's and at the end (irreversible ones
    only read)."""
    steps = []
    for node in cluster.nodes:
        values = node_values(cluster, node)
        layers = [
            {
                "name": layer.name,
                "reversible": layer.reversible,
                "facts": {
                    name: want.model_dump(exclude_none=True) for name, want in layer.facts.items()
                },
                **{
                    key: shlex.join(fill(arg, values) for arg in argv)
                    for key, argv in (("apply", layer.apply), ("revert", layer.revert))
                    if argv is not None
                },
            }
            for layer in release.host
        ]
        steps.append(
            PlanStep(
                stage="host", node=node.name,
                action="revert, then apply the host layers; per arm: on for the candidate, off "
                "for the previous; reverted at the end",
                detail={"layers": layers},
            )
        )  # fmt: skip
    return steps if release.host else []


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


def _distribute(cluster: Cluster, image: str) -> list[PlanStep]:
    return [
        PlanStep(
            stage="distribute", node=node.name,
            action=f"put the release on the node ({cluster.runtime.kind} runtime)",
            detail={"release": image, "verify": "one image ID or build digest everywhere"},
        )
        for node in cluster.nodes
    ]  # fmt: skip
