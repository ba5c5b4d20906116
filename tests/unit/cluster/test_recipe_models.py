"""Issue 26 item 1: the model is looked for on the node's disk, behind its container mount."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from flows.cluster.boot.session import ensure_models
from flows.cluster.ops.lock import lock_settings
from flows.cluster.runtime.base import Installed
from flows.cluster.runtime.containers import BindMount
from flows.cluster.runtime.docker import DockerRanks, host_path
from flows.cluster.runtime.pytest_host import workspace_in
from flows.cluster.transport.base import CommandResult
from flows.errors import BuildError
from flows.lines import silent
from flows.spec.cluster import Cluster
from flows.spec.launch import render_all
from flows.spec.load import load_model
from flows.spec.release import Release

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "examples" / "spark-ds41f"


class Disk:
    """A node's transport that answers `test -e PATH` from a set of existing paths."""

    def __init__(self, node: str, existing: set[str]) -> None:
        self.node, self.existing, self.tested = node, existing, []  # type: list[str]

    def run(self, argv: list[str], **_: object) -> CommandResult:
        assert argv[:2] == ["test", "-e"], argv
        self.tested.append(argv[2])
        rc = 0 if argv[2] in self.existing else 1
        return CommandResult(
            node=self.node, argv=tuple(argv), rc=rc, stdout="", stderr="", duration=0
        )


def test_the_model_is_the_host_side_of_the_models_mount_not_the_container_path() -> None:
    cluster = load_model(RECIPE / "clusters" / "tp3-triangle.yaml", Cluster)
    release = load_model(RECIPE / "releases" / "r6x.yaml", Release)
    plans = render_all(cluster, release)
    snapshot = next(m.source for m in cluster.runtime.mounts if m.target == "/models")  # type: ignore[union-attr]
    disks = {p.node: Disk(p.node, {snapshot}) for p in plans}  # no /models on any host
    runtime = DockerRanks(cluster, disks, release=release)  # type: ignore[arg-type]
    ensure_models(plans, disks, runtime=runtime)  # type: ignore[arg-type]
    assert all(disk.tested == [snapshot] for disk in disks.values())

    disks["dgx2"].existing.clear()  # dgx2 lacks the snapshot of the pinned revision
    with pytest.raises(BuildError) as missing:
        ensure_models(plans, disks, runtime=runtime)  # type: ignore[arg-type]
    assert f"node dgx2: no model at {snapshot} (mounted at /models)" in str(missing.value)


def test_the_deepest_mount_covering_a_container_path_names_its_host_path() -> None:
    mounts = [
        BindMount(source="/h/cache", target="/cache"),
        BindMount(source="/h/m", target="/cache/m"),
    ]
    assert host_path(mounts, "/cache/m/x") == "/h/m/x"
    assert host_path(mounts, "/cache/y") == "/h/cache/y"
    assert host_path(mounts, "/models") == "/models"


def test_sparkgate_writes_its_lock_and_test_workspaces_outside_the_recipe_checkout() -> None:
    cluster = load_model(RECIPE / "clusters" / "tp3-triangle.yaml", Cluster)
    checkout = cluster.head.workdir  # where `bin/spark build image` refuses untracked files
    lock = lock_settings(cluster).path
    assert not PurePosixPath(lock).is_relative_to(checkout), f"lock {lock} is in {checkout}"
    assert lock == f"{checkout}.sparkgate/sparkgate.lock"
    release = load_model(RECIPE / "releases" / "r6x.yaml", Release)
    disks = {node.name: Disk(node.name, set()) for node in cluster.nodes}
    runtime = DockerRanks(cluster, disks, release=release)  # type: ignore[arg-type]
    installed = Installed(
        runtime="docker", release="r6x", digest="sha256:1", image="i", nodes=[], summary=[]
    )
    host = runtime.release_tests("dgx1", installed, silent)
    workspace = workspace_in(host._workdir)  # where the release tests' files go
    assert not PurePosixPath(workspace).is_relative_to(checkout), workspace
    moved = cluster.head.model_copy(update={"state_dir": "/var/lib/sparkgate"})
    assert moved.state_folder == "/var/lib/sparkgate"
