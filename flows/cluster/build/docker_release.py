"""The release image of a docker cluster boot: built once, on every node, the same image ID.

The docker runtime builds with `build_for` and installs with `distribute_for` where the process
runtime builds a wheel and installs a virtual environment. The tag is content-addressed
(`<name>:<source12>-<release>`) and never moved, so a second boot of the same release reuses the
image on every node; a node that ends up with another image ID stops the boot.
"""

from __future__ import annotations

from pathlib import Path

from flows.cluster.build.distribute import NodeImage, distribute_image
from flows.cluster.build.release_image import (
    ImageBuild,
    build_on,
    docker_endpoints,
)
from flows.cluster.transport.docker_client import DockerEndpoint
from flows.errors import BuildError
from flows.lines import LineSink, silent
from flows.spec.build import CONTROLLER
from flows.spec.cluster import Cluster, DockerRuntime
from flows.spec.release import Release


class LineProgress:
    """An ImageProgress that reports build steps and transfers as plain lines."""

    def __init__(self, say: LineSink = silent) -> None:
        self._say = say

    def build_step(self, step: int, total: int, instruction: str) -> None:
        """One line per Dockerfile step."""
        self._say(f"image build step {step}/{total}: {instruction[:80]}")

    def build_output(self, line: str) -> None:
        """Builder output is not repeated (the build error carries its tail)."""

    def build_done(self, ok: bool) -> None:
        """The build's end."""
        self._say("image built" if ok else "image build failed")

    def transfer_start(self, node: str, total_bytes: int) -> None:
        """A transfer begins."""
        self._say(f"{node}: loading the image (about {total_bytes / 1e6:.0f} MB)")

    def transfer_advance(self, node: str, sent_bytes: int) -> None:
        """Progress within a transfer is not reported line by line."""

    def transfer_done(self, node: str, ok: bool) -> None:
        """A transfer's end."""
        self._say(f"{node}: image {'loaded' if ok else 'transfer failed'}")


def build_for(
    cluster: Cluster, release: Release, state: Path, say: LineSink = silent
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
        progress=LineProgress(say),
    )


def distribute_for(
    cluster: Cluster, release: Release, build: ImageBuild, say: LineSink = silent
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
    copies = distribute_image(source, others, build.built.tag, LineProgress(say))
    nodes = copies[1:] if source.node == CONTROLLER else copies  # verified in [source, *others]
    wrong = [n.facts.node for n in nodes if n.facts.image_id != build.built.image_id]
    if wrong:
        raise BuildError(
            f"{build.built.tag}: image ID differs from {build.built.image_id} on {', '.join(wrong)}"
        )
    verb = build.verb
    say(f"image {build.built.tag} {verb}, same ID on {len(nodes)} nodes")
    return nodes
