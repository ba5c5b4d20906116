"""The release-tests gate on a docker cluster: pytest inside the release image, on one node.

The image carries the engine tree it was built from (tests and pytest configuration included,
at `/opt/engine` in the bundled Dockerfile), so the candidate files are listed there, not on the
host. A one-shot container of the image, with the cluster stopped, copies that tree into a
fresh workspace on the node, lays the release's changed files over it and runs pytest; the
workspace is bind-mounted, so the JUnit XML is read through the node's transport exactly as for
the process runtime. Selection, classification, outcomes and verdict stay in `rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from flows.cluster.build.docker_release import release_image_for
from flows.cluster.runtime.docker import DockerRanks
from flows.cluster.transport.base import Transport
from flows.errors import BuildError, SparkgateError
from flows.gates.base import GateContext
from flows.gates.release_tests.nodefiles import put_all
from flows.gates.release_tests.rules import pytest_argv

IMAGE_TREE = "/opt/engine"
LIST_TIMEOUT_S = 120.0
# $0 is the workspace; the tree is copied (not linked) so the image is never written to.
_STAGE = (
    'set -e; mkdir -p "$0/tree"; cp -R "{tree}/." "$0/tree/"; '
    'if [ -d "$0/overlay" ]; then cp -R "$0/overlay/." "$0/tree/"; fi; '
    'cd "$0/tree"; exec "$@"'
)


def image_tree(output: str, tree: str = IMAGE_TREE) -> list[str]:
    """Paths relative to the tree from `find TREE -type f` output (pure)."""
    prefix = tree.rstrip("/") + "/"
    return sorted(
        line.removeprefix(prefix) for line in output.splitlines() if line.startswith(prefix)
    )


def container_argv(python: str, workspace: str, gate: Sequence[str]) -> list[str]:
    """Stage the image's tree and the overlay in the workspace, then pytest there (pure)."""
    tree = f"{workspace}/tree"
    return ["sh", "-c", _STAGE.format(tree=IMAGE_TREE), workspace, *pytest_argv(python, tree, gate)]


@dataclass
class ImageTests:
    """The release image on the chosen node, ready to list and run its tests."""

    ranks: DockerRanks
    node: str
    transport: Transport
    python: str
    say: Callable[[str], None]

    @classmethod
    def for_release(cls, context: GateContext, node: str) -> ImageTests:
        """Build (or reuse) the release image everywhere, as a boot would."""
        image = release_image_for(context.cluster, context.release, context.state, context.say)
        ranks = DockerRanks(
            context.cluster, context.transports, release=context.release, image=image.built.tag
        )
        return cls(
            ranks=ranks,
            node=node,
            transport=context.transports[node],
            python=context.cluster.runtime.python,
            say=context.say,
        )

    def list_tree(self) -> list[str]:
        """Every Python file of the engine tree inside the image."""
        argv = ["find", IMAGE_TREE, "-type", "f", "-name", "*.py"]
        code, output = self.ranks.one_shot(self.node, "tests-tree", argv, [], LIST_TIMEOUT_S)
        if code != 0:
            raise BuildError(f"{self.node}: cannot list {IMAGE_TREE} in the image: {output[-800:]}")
        return image_tree(output)

    def run_pytest(
        self, gate: Sequence[str], workspace: str, changed: Mapping[str, Path], *, timeout: float
    ) -> tuple[int, str, str]:
        """pytest in a one-shot container; exit status, output and the JUnit XML's node path."""
        self.transport.run(["mkdir", "-p", "--", workspace], timeout=60, check=True)
        if changed:
            put_all(self.transport, PurePosixPath(workspace) / "overlay", changed)
        self.ranks.hand_over(self.node, [workspace])
        self.say(f"{self.node}: pytest on {len(gate)} gate files in the release image")
        argv = container_argv(self.python, workspace, gate)
        try:
            rc, output = self.ranks.one_shot(self.node, "release-tests", argv, [workspace], timeout)
        except SparkgateError as error:  # a timeout: the container is gone, keep the JUnit XML
            rc, output = 124, f"pytest did not finish within {timeout:g}s: {error}"
        return rc, output, f"{workspace}/tree/junit.xml"


def image_tests_for(context: GateContext, node: str) -> ImageTests | None:
    """The release image's tests on `node` when the cluster runs docker (None: process runtime).

    The one runtime-kind branch of the gate, kept here until the runtime runs release tests.
    """
    if context.cluster.runtime.kind == "docker":
        return ImageTests.for_release(context, node)
    return None
