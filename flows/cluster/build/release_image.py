"""Build a release's engine image once on the build node and put it on every node, verified.

This is the whole docker "build and distribute" stage in reading order: base image (debootstrap,
cached), wheelhouse (pip download on the host, cached), image build on the build node, streamed
transfer to every other node, same image verified everywhere. Each step lives in its own module;
this one only wires them, so a Prefect task can call one function and record its result.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from flows.cluster.build.base_image import BaseImageSpec, ensure_base_image, host_mirror
from flows.cluster.build.distribute import NodeImage, distribute_image
from flows.cluster.build.image import BuildRequest, BuiltImage, build_image
from flows.cluster.build.progress import ImageProgress
from flows.cluster.build.wheelhouse import engine_requirements, ensure_wheelhouse, host_spec
from flows.cluster.transport.docker_client import DockerEndpoint, connect
from flows.cluster.transport.factory import docker_ssh
from flows.errors import BuildError, SpecError
from flows.spec.cluster import Cluster, DockerRuntime
from flows.spec.launch import placeholder_values
from flows.spec.release import Release
from flows.spec.template import fill


class ImageBuild(BaseModel):
    """The release image built on the build node (the docker build kind), not yet distributed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    built: BuiltImage
    base_image: str
    lock_digest: str
    seconds: dict[str, float]
    origin: Literal["source", "image", "command", "dockerfile"] = "source"
    built_on: str | None = None  # the node whose daemon holds it (None: the head; or controller)

    @property
    def digest(self) -> str:
        """The image ID: what every node must hold."""
        return self.built.image_id

    @property
    def short(self) -> str:
        """The image tag, which carries the source digest."""
        return self.built.tag

    @property
    def verb(self) -> str:
        """How the image came to be here: built, reused (built before) or adopted."""
        if self.origin == "dockerfile":
            return "built"
        if self.origin != "source":
            return "adopted"
        return "reused" if self.built.reused else "built"


class ReleaseImage(BaseModel):
    """The built image and every node's verified copy, with the time each step took."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    built: BuiltImage
    base_image: str
    lock_digest: str
    nodes: tuple[NodeImage, ...]
    seconds: dict[str, float]


def docker_endpoints(cluster: Cluster, release: Release) -> list[DockerEndpoint]:
    """Every node's daemon, head (the build node) first; SpecError unless the runtime is docker."""
    if not isinstance(cluster.runtime, DockerRuntime):
        raise SpecError(
            f"cluster {cluster.name} runs ranks as {cluster.runtime.kind}es, not in Docker",
            key="runtime.kind",
            expected="docker",
        )
    nodes = sorted(cluster.nodes, key=lambda node: (not node.head, node.rank))
    return [
        DockerEndpoint(
            node=node.name,
            base_url=fill(
                node.overrides.docker_daemon or cluster.runtime.daemon,
                placeholder_values(cluster, release, node),
            ),
            ssh=docker_ssh(cluster, node),
        )
        for node in nodes
    ]


def build_on(
    build_node: DockerEndpoint,
    release: str,
    engine_dir: Path,
    cache_dir: Path,
    *,
    dockerfile: Path | None = None,
    build_args: dict[str, str] | None = None,
    progress: ImageProgress | None = None,
) -> ImageBuild:
    """Base, wheelhouse and the image build on build_node; BuildError on any failure."""
    seconds: dict[str, float] = {}
    client = connect(build_node)
    _check_architecture(build_node, str(client.info().get("Architecture", "")))
    started = time.monotonic()
    base = ensure_base_image(client, BaseImageSpec(mirror=host_mirror()), cache_dir)
    seconds["base"] = time.monotonic() - started
    started = time.monotonic()
    wheelhouse = ensure_wheelhouse(
        host_spec(engine_requirements(engine_dir / "pyproject.toml")), cache_dir
    )
    seconds["wheelhouse"] = time.monotonic() - started
    request = BuildRequest(
        release=release,
        engine_dir=engine_dir,
        dockerfile=dockerfile or engine_dir / "Dockerfile",
        wheelhouse=wheelhouse,
        base_image=base,
        build_args=build_args or {},
    )
    built = build_image(client, request, progress)
    seconds["build"] = built.seconds
    return ImageBuild(
        built=built, base_image=base, lock_digest=wheelhouse.lock_digest, seconds=seconds
    )


def build_release_image(
    build_node: DockerEndpoint,
    other_nodes: Sequence[DockerEndpoint],
    release: str,
    engine_dir: Path,
    cache_dir: Path,
    *,
    dockerfile: Path | None = None,
    build_args: dict[str, str] | None = None,
    progress: ImageProgress | None = None,
) -> ReleaseImage:
    """Build on build_node, distribute and verify; BuildError on any failure."""
    build = build_on(
        build_node, release, engine_dir, cache_dir,
        dockerfile=dockerfile, build_args=build_args, progress=progress,
    )  # fmt: skip
    started = time.monotonic()
    nodes = distribute_image(build_node, other_nodes, build.built.tag, progress)
    return ReleaseImage(
        built=build.built,
        base_image=build.base_image,
        lock_digest=build.lock_digest,
        nodes=tuple(nodes),
        seconds={**build.seconds, "distribute": time.monotonic() - started},
    )


def _check_architecture(build_node: DockerEndpoint, architecture: str) -> None:
    """The base rootfs and wheels are made on this host, so the build node must match it."""
    if architecture != platform.machine():
        raise BuildError(
            f"build node {build_node.node} is {architecture or 'of unknown architecture'} but this "
            f"host is {platform.machine()}: its debootstrap base and wheels would not run there"
        )
