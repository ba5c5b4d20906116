"""The release image of a docker cluster: built once on the build node, on every node, verified.

The one build-and-distribute path, in reading order: base image (debootstrap, cached),
wheelhouse (pip download on the host, cached), the image built from the engine's source on the
build node (`source_image.py`), streamed to every other node, the same image ID verified
everywhere. The docker runtime calls `build_for` in the build stage and `distribute_for` in the
distribute stage (where the process runtime builds a wheel and installs a virtual environment);
`sparkgate image build` has the runtime run both and shows an `InstalledImage`. The tag is
content-addressed (`<name>:<source12>-<release>`) and never moved, so a second boot of the same
release reuses the image on every node; a node that ends up with another image ID stops the
boot. Images sparkgate does not build from source are `adopted_image.py`'s and `dockerfile.py`'s;
they are distributed by `distribute_for` too.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from flows.cluster.build.base_image import BaseImageSpec, ensure_base_image, host_mirror
from flows.cluster.build.distribute import NodeImage, distribute_image
from flows.cluster.build.progress import ImageProgress
from flows.cluster.build.source_image import BuildRequest, BuiltImage, build_image
from flows.cluster.build.wheelhouse import engine_requirements, ensure_wheelhouse, host_spec
from flows.cluster.transport.docker_client import DockerEndpoint, connect
from flows.cluster.transport.factory import docker_ssh
from flows.errors import BuildError, SpecError
from flows.lines import LineSink, silent
from flows.spec.build import CONTROLLER, BuildKind
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
    origin: BuildKind = "source"
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


class InstalledImage(ReleaseImage):
    """What `sparkgate image build` made of a release on a cluster, whatever its build kind:
    the image (built from source, adopted, or made by the operator's command) and every node's
    verified copy. Empty `base_image` and `lock_digest` for an image sparkgate did not build
    from source."""

    release: str
    cluster: str
    runtime: str
    origin: BuildKind
    verb: str
    built_on: str | None
    summary: tuple[str, ...]


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


def build_for(
    cluster: Cluster, release: Release, state: Path, progress: ImageProgress | None = None
) -> ImageBuild:
    """Build (or reuse) the release's image on the head's daemon."""
    head = docker_endpoints(cluster, release)[0]
    source = release.build.engine_tree
    return build_on(
        head,
        release.name,
        source,
        state / "cache" / "docker",
        dockerfile=source / release.build.dockerfile,
        build_args={name: str(value) for name, value in release.build.args.items()},
        progress=progress,
    )


def distribute_for(
    cluster: Cluster,
    release: Release,
    build: ImageBuild,
    progress: ImageProgress | None = None,
    say: LineSink = silent,
) -> list[NodeImage]:
    """Load the built image on every other node and verify one image ID everywhere.

    An image built on the controller's daemon is sent to every node; the controller's copy is
    the reference and not counted as a node.
    """
    endpoints = docker_endpoints(cluster, release)
    if build.built_on == CONTROLLER and isinstance(cluster.runtime, DockerRuntime):
        source = DockerEndpoint(node=CONTROLLER, base_url=cluster.runtime.builds.controller_daemon)
    else:
        source = next((e for e in endpoints if e.node == build.built_on), endpoints[0])
    others = [endpoint for endpoint in endpoints if endpoint is not source]
    nodes = distribute_built(source, others, build, progress)
    say(f"image {build.built.tag} {build.verb}, same ID on {len(nodes)} nodes")
    return nodes


def distribute_built(
    source: DockerEndpoint,
    others: Sequence[DockerEndpoint],
    build: ImageBuild,
    progress: ImageProgress | None = None,
) -> list[NodeImage]:
    """Stream the image from `source` to `others`; every node's copy (a controller source not
    counted), BuildError when one holds another image ID."""
    copies = distribute_image(source, others, build.built.tag, progress)
    nodes = copies[1:] if source.node == CONTROLLER else copies  # verified in [source, *others]
    wrong = [n.facts.node for n in nodes if n.facts.image_id != build.built.image_id]
    if wrong:
        raise BuildError(
            f"{build.built.tag}: image ID differs from {build.built.image_id} on {', '.join(wrong)}"
        )
    return nodes


def _check_architecture(build_node: DockerEndpoint, architecture: str) -> None:
    """The base rootfs and wheels are made on this host, so the build node must match it."""
    if architecture != platform.machine():
        raise BuildError(
            f"build node {build_node.node} is {architecture or 'of unknown architecture'} but this "
            f"host is {platform.machine()}: its debootstrap base and wheels would not run there"
        )
