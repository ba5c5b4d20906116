"""How a release runs on a cluster: the one interface callers see, whatever the runtime.

A runtime builds a release and installs the build on every node, prepares the model, empties
caches, reports its preflight facts and hands out a host for the release tests; for the boot
loop it starts a rank from its launch plan, says whether it still runs (and how it ended),
returns its log, stops it (signal, grace, then kill) and describes it for evidence. `process`
(`flows.cluster.runtime.process`) runs the engine as a process group through the node's
transport; `docker` (`flows.cluster.runtime.docker`) runs the release image through the node's
daemon. The handle of a started rank is a plain model, so `sparkgate cluster stop` in another
process can find what `cluster start` left running.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from flows.cluster.boot.caches import CacheTarget
from flows.cluster.build.distribute import NodeImage
from flows.cluster.build.release_image import ImageBuild
from flows.cluster.build.wheel import ProcessBuild
from flows.lines import LineSink
from flows.spec.cluster import Node
from flows.spec.launch import LaunchPlan
from flows.spec.release import Release

RuntimeKind = Literal["process", "docker", "operator"]
"""Which runtime runs the ranks (the cluster file's `runtime.kind`)."""

Build = ProcessBuild | ImageBuild
"""A build kind: a wheel and its wheelhouse (process) or a release image (docker)."""


class RankHandle(BaseModel):
    """A started rank: where it runs and how to find it again."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    runtime: RuntimeKind
    node: str
    rank: int
    head: bool
    started_at: datetime
    plan: LaunchPlan
    pid: int | None = Field(default=None, description="Process group id (process runtime).")
    log_path: str | None = Field(default=None, description="Log file on the node (process).")
    exit_path: str | None = Field(default=None, description="Exit status file (process).")
    container: str | None = Field(default=None, description="Container name (docker runtime).")
    container_id: str | None = Field(default=None, description="Container ID (docker runtime).")
    daemon: str | None = Field(default=None, description="Daemon URL (docker runtime).")
    image: str | None = Field(default=None, description="Image tag the rank runs (docker).")

    @classmethod
    def started(cls, kind: RuntimeKind, plan: LaunchPlan, at: datetime, **where: Any) -> RankHandle:
        """The handle of the rank `plan` started at `at`; `where` says how to find it."""
        return cls(
            runtime=kind, node=plan.node, rank=plan.rank, head=plan.head, started_at=at,
            plan=plan, **where,
        )  # fmt: skip


class RankStatus(BaseModel):
    """Whether a rank runs, and if not, how it ended."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    running: bool
    exit_code: int | None = None
    oom_killed: bool = False
    detail: str = ""

    def describe(self) -> str:
        """A short phrase for tables and error messages."""
        if self.running:
            return "running"
        if self.oom_killed:
            return "killed by the OOM killer"
        if self.exit_code is None:
            return "gone (exit status unknown)"
        if self.exit_code > 128:
            return f"exited {self.exit_code} (signal {self.exit_code - 128})"
        return f"exited {self.exit_code}"


class NodeInstall(BaseModel):
    """One node's copy of the build."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    reused: bool = Field(description="The node already held this build.")
    python: str | None = Field(default=None, description="The build's interpreter (process).")
    verified: NodeImage | None = Field(
        default=None, description="The node's image, checked against the build node's (docker)."
    )


class Installed(BaseModel):
    """The build on every node, verified the same: what a boot and the release tests run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    runtime: RuntimeKind
    release: str
    digest: str = Field(description="The build digest (process) or image ID (docker).")
    image: str | None = Field(default=None, description="Release image tag (docker runtime).")
    nodes: list[NodeInstall]
    summary: list[str] = Field(description="One line per fact worth showing (distribute stage).")

    def launch_values(self, node: str) -> dict[str, str]:
        """Placeholder values the node's launch plan takes from the install (its python)."""
        found = next((n for n in self.nodes if n.node == node), None)
        return {"python": found.python} if found is not None and found.python else {}


class PytestRun(BaseModel):
    """One pytest run of release tests on a node, its raw files already kept locally."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    rc: int
    output: str
    junit_xml: str | None = Field(description="pytest's JUnit XML, None when it wrote none.")
    files: list[str] = Field(description="Raw files written to the output folder.")


class ReleaseTestHost(Protocol):
    """Where the release tests of one node run: the built test tree and its interpreter."""

    @property
    def node(self) -> str:
        """The node the tests run on."""
        ...

    def list_tree(self) -> list[str]:
        """Every Python file of the built test tree, relative to the tree."""
        ...

    def run_pytest(
        self,
        gate: Sequence[str],
        changed: Mapping[str, Path],
        out_dir: Path,
        *,
        timeout: float,
        options: Sequence[str] = ...,
    ) -> PytestRun:
        """pytest with `options` on the gate files of a fresh copy of the tree with `changed`
        laid over it; pytest.txt and junit.xml are kept in out_dir and the node's workspace
        removed."""
        ...


class Runtime(Protocol):
    """Build, install, start, watch, read and stop ranks on the nodes of one cluster."""

    @property
    def kind(self) -> RuntimeKind:
        """Which runtime this is."""
        ...

    def prepare(self, plan: LaunchPlan) -> None:
        """Create the rank's folders (workdir, caches, logs) on its node."""
        ...

    def start(self, plan: LaunchPlan) -> RankHandle:
        """Start the rank in the background."""
        ...

    def status(self, handle: RankHandle) -> RankStatus:
        """Running, or how it ended."""
        ...

    def read_log(self, handle: RankHandle, offset: int = 0) -> str:
        """The rank's log from byte `offset` on (timestamps where the runtime has them)."""
        ...

    def settle(self, handles: Sequence[RankHandle]) -> None:
        """Once the head answers: wait for what the start of `handles` still does (BootError if
        it fails), so a boot ends when the launch has, not while it still runs."""
        ...

    def stop(self, handle: RankHandle) -> RankStatus:
        """Stop signal, grace, then kill; returns how it ended."""
        ...

    def inspect(self, handle: RankHandle) -> dict[str, Any]:
        """Everything the runtime knows about the rank, for evidence."""
        ...

    def build(self, release: Release, say: LineSink) -> Build:
        """Build the release once (content-addressed; reused when nothing changed)."""
        ...

    def install(
        self, build: Build, say: LineSink, *, nodes: Sequence[str] | None = None
    ) -> Installed:
        """Put the build on every node (or on `nodes`) and verify they hold the same one."""
        ...

    def model_on_node(self, plan: LaunchPlan) -> str:
        """Where the rank's model directory is on its node's own disk (what to test for)."""
        ...

    def prepare_model(self, plan: LaunchPlan, timeout: float) -> None:
        """Run the profile's model preparation for the rank's node."""
        ...

    def empty_caches(self, targets: Sequence[CacheTarget]) -> None:
        """Remove and re-create each cache folder on its node."""
        ...

    def node_facts(self, node: Node, values: Mapping[str, str]) -> dict[str, object]:
        """The runtime's preflight facts of one node (python version, or docker daemon)."""
        ...

    def release_tests(self, node: str, installed: Installed, say: LineSink) -> ReleaseTestHost:
        """The node's built test tree and interpreter, ready to list and run release tests."""
        ...
