"""Release tests on a node of the docker runtime: pytest inside the release image.

The image carries the engine tree it was built from (tests and pytest configuration included),
at the engine profile's `tests_root` (`/opt/engine` in the bundled Dockerfile,
`/opt/spark3/candidate/vllm` in the recipe's image), so the candidate files are listed there, not
on the host. A one-shot container of the image, with the cluster's run arguments and mounts and
the node's rank environment (what a rank of that node gets), copies that tree into a fresh
workspace on the node, lays the release's changed files over it and runs pytest; the workspace
is bind-mounted, so the JUnit XML is read through the node's transport exactly as for the
process runtime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Protocol

from flows.cluster.runtime.base import PytestRun
from flows.cluster.runtime.pytest_host import keep_results, put_all, pytest_argv, workspace_in
from flows.cluster.transport.base import Transport
from flows.errors import BuildError, SparkgateError
from flows.lines import LineSink
from flows.spec.release_tests import PYTEST_OPTIONS


class ImageContainers(Protocol):
    """What a release-test host needs from the docker runtime: one-shot containers."""

    def one_shot(
        self,
        node: str,
        label: str,
        argv: Sequence[str],
        folders: Sequence[str],
        timeout: float,
        *,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        with_run_args: bool = False,
    ) -> tuple[int, str]:
        """Run argv to its end in a container of the release image; exit code and output."""
        ...

    def hand_over(self, node: str, folders: Sequence[str]) -> None:
        """Give the folders to the image's user."""
        ...


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


def container_argv(
    python: str,
    workspace: str,
    gate: Sequence[str],
    tree: str = IMAGE_TREE,
    options: Sequence[str] = PYTEST_OPTIONS,
) -> list[str]:
    """Stage the image's tree and the overlay in the workspace, then pytest there (pure)."""
    staged = f"{workspace}/tree"
    pytest = pytest_argv(python, staged, gate, options)
    return ["sh", "-c", _STAGE.format(tree=tree), workspace, *pytest]


class ImageTestHost:
    """The release image on one node, ready to list and run its tests."""

    def __init__(
        self,
        ranks: ImageContainers,
        transport: Transport,
        *,
        python: str,
        workdir: str,
        say: LineSink,
        tree: str = IMAGE_TREE,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._ranks = ranks
        self._transport = transport
        self._python = python
        self._workdir = workdir
        self._say = say
        self._tree = tree
        self._env = dict(env or {})

    @property
    def node(self) -> str:
        """The node the tests run on."""
        return self._transport.node

    def list_tree(self) -> list[str]:
        """Every Python file of the engine tree inside the image."""
        argv = ["find", self._tree, "-type", "f", "-name", "*.py"]
        code, output = self._ranks.one_shot(self.node, "tests-tree", argv, [], LIST_TIMEOUT_S)
        if code != 0:
            raise BuildError(f"{self.node}: cannot list {self._tree} in the image: {output[-800:]}")
        return image_tree(output, self._tree)

    def run_pytest(
        self,
        gate: Sequence[str],
        changed: Mapping[str, Path],
        out_dir: Path,
        *,
        timeout: float,
        options: Sequence[str] = PYTEST_OPTIONS,
    ) -> PytestRun:
        """pytest in a one-shot container with the cluster's run arguments (and the node's
        rank environment: the recipe's HF_HUB_OFFLINE=1); files kept."""
        transport, workspace = self._transport, workspace_in(self._workdir)
        transport.run(["mkdir", "-p", "--", workspace], timeout=60, check=True)
        if changed:
            put_all(transport, PurePosixPath(workspace) / "overlay", changed)
        self._ranks.hand_over(self.node, [workspace])
        self._say(f"{self.node}: pytest on {len(gate)} gate files in the release image")
        argv = container_argv(self._python, workspace, gate, self._tree, options)
        try:
            rc, output = self._ranks.one_shot(
                self.node, "release-tests", argv, [workspace], timeout,
                env=self._env, with_run_args=True,
            )  # fmt: skip
        except SparkgateError as error:  # a timeout: the container is gone, keep the JUnit XML
            rc, output = 124, f"pytest did not finish within {timeout:g}s: {error}"
        junit = f"{workspace}/tree/junit.xml"
        return keep_results(
            transport, rc, output, junit=junit, workspace=workspace, out_dir=out_dir
        )
