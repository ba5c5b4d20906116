"""The one place that turns a cluster's runtime kind into a runtime.

Everything else asks the runtime it is given (build, install, prepare the model, empty caches,
preflight facts, release tests, ranks) and never looks at the kind itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flows.cluster.build.progress import ImageProgress
from flows.cluster.runtime.base import Runtime
from flows.cluster.runtime.process import ProcessRuntime
from flows.cluster.transport.base import Transport
from flows.errors import ClusterError, SpecError
from flows.spec.cluster import Cluster, DockerRuntime, OperatorRuntime
from flows.spec.launch import LaunchPlan
from flows.spec.load import located
from flows.spec.release import Release


def runtime_for(
    cluster: Cluster,
    transports: Mapping[str, Transport],
    state: Path | None = None,
    *,
    release: Release | None = None,
    image: str | None = None,
    progress: ImageProgress | None = None,
) -> Runtime:
    """The runtime the cluster file asks for.

    `state` is where builds are cached (needed to build); `release` and `image` let a docker
    runtime start ranks without building (`cluster stop|status|logs` need neither); `progress`
    draws a docker runtime's image build and transfers (`sparkgate image build`'s bars).
    """
    if cluster.runtime.kind == "process":
        return ProcessRuntime(transports, cluster=cluster, state=state, release=release)
    if isinstance(cluster.runtime, OperatorRuntime):
        from flows.cluster.runtime.operator import OperatorRanks  # noqa: PLC0415 - docker SDK

        return OperatorRanks(
            cluster, transports, release=release, image=image, state=state, progress=progress
        )
    from flows.cluster.runtime.docker import DockerRanks  # noqa: PLC0415 - docker SDK on demand

    return DockerRanks(
        cluster, transports, release=release, image=image, state=state, progress=progress
    )


def check_fits(cluster: Cluster, release: Release, *files: Path | str) -> None:
    """SpecError (exit 2), before anything starts, when the cluster's runtime cannot run the
    release; `files` (the release's and the cluster's) name the file and line that set the key.

    The checks are `_fits`'s.
    """
    try:
        _fits(cluster, release)
    except SpecError as error:
        raise located(error, *files) from None


def _fits(cluster: Cluster, release: Release) -> None:
    """SpecError unless the cluster's runtime can run the release.

    Image builds (adopted, or made by the operator's command) run only in docker clusters: a
    process cluster installs a wheel built from a source tree. A docker cluster's `run_args` must
    all be options the runtime passes on (it refuses the rest rather than drop them), and its
    mounts must fill (a `{model_revision}` with a release that sets none would mount nothing). An
    image build must name a build node the cluster has, and a dockerfile's named contexts need
    buildx.
    """
    if isinstance(cluster.runtime, DockerRuntime):  # docker, or the operator's launcher
        from flows.cluster.runtime.docker import cluster_mounts  # noqa: PLC0415 - docker SDK
        from flows.cluster.runtime.run_args import run_arg_options  # noqa: PLC0415

        try:
            run_arg_options(cluster.runtime.run_args)
        except ClusterError as error:
            raise SpecError(str(error), key="runtime.run_args") from None
        for node in cluster.nodes:  # a mount naming a model field the release leaves unset
            cluster_mounts(cluster, release, node)
        if release.build.kind == "dockerfile":
            from flows.cluster.build.dockerfile import check_buildable  # noqa: PLC0415

            check_buildable(cluster, release)
        elif release.build.makes_image:  # adopted, or made by the operator's command on `on`
            from flows.cluster.build.adopted_image import build_node  # noqa: PLC0415

            build_node(cluster, release.build)
    elif release.build.makes_image:
        raise SpecError(
            f"release {release.name} adopts an image (build.kind {release.build.kind}), but "
            f"cluster {cluster.name} runs ranks as processes",
            key="build.kind",
            expected="a docker cluster, or build.kind source",
        )


def rank_spec(cluster: Cluster, release: Release, plan: LaunchPlan, image: str) -> dict[str, Any]:
    """How the runtime would start one rank, as data (for `qualify --plan`; touches nothing).

    A process rank is its argv, environment and folder; a docker rank is the SDK's container
    create options (image, command, environment, mounts, run arguments); an operator rank is
    the launcher's commands.
    """
    if cluster.runtime.kind == "process":
        return {"process": {"argv": plan.argv, "env": plan.env, "cwd": plan.cwd}}
    if isinstance(cluster.runtime, OperatorRuntime):
        from flows.cluster.runtime.operator import launcher_cwd  # noqa: PLC0415

        commands = cluster.runtime.commands
        return {
            "operator": {
                "start": commands.start, "stop": commands.stop, "cwd": launcher_cwd(cluster),
                "on": cluster.head.name, "container": cluster.runtime.container_name,
                "note": "the operator's launcher creates the container (every node at once)",
            }
        }  # fmt: skip
    from flows.cluster.runtime.containers import create_options  # noqa: PLC0415
    from flows.cluster.runtime.docker import rank_container  # noqa: PLC0415 - docker SDK

    node = next(n for n in cluster.nodes if n.name == plan.node)
    options = create_options(rank_container(cluster, release, node, plan, image))
    return {"container": _plain(options)}


def rank_view(cluster: Cluster, release: Release, plan: LaunchPlan, image: str) -> dict[str, Any]:
    """What the rank gets after every overlay (cluster, engine profile, release, node
    overrides), as the runtime would pass it: for a container its mounts, devices, environment
    and command as docker receives them; for a process its argv, environment and folder."""
    spec = rank_spec(cluster, release, plan, image)
    if "container" not in spec:
        return dict(next(iter(spec.values())))
    from flows.cluster.runtime.containers import container_view  # noqa: PLC0415

    return container_view(spec["container"])


def _plain(value: Any) -> Any:
    """SDK option objects (Mount, Ulimit, DeviceRequest are dicts) as plain JSON data."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
