"""A local two-rank cluster of the real bundled engine, on free ports and private folders.

The cluster file is the shipped `config/local.yaml`, only with node workdirs moved under a
session temp folder and free ports, so tests boot exactly what users boot. Kernel caches are
shared by the session's tests (a cold preparation costs seconds per rank); tests that need cold
caches empty them through the pipeline itself.

Projects (tests/support/project.py) have node workdirs of their own; `WarmNodes` carries the
prepared models, kernel caches and installed builds from one project's nodes to the next, so
only the session's first project prepares and installs cold (as a real cluster's nodes keep
what an earlier qualification installed). The engine rewrites a kernel's source only when it
changed and numba checks its cache against the source's stamp, so a copied cache is used only
where valid; an installed build is reused only where its marker names the build's digest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.cluster.build.wheel import MARKER
from flows.cluster.transport.local import LocalTransport
from flows.gates.base import GateContext
from flows.spec.cluster import Cluster
from flows.spec.launch import LaunchPlan, render_all
from flows.spec.load import load_model
from flows.spec.release import Release

from .net import free_port
from .paths import ROOT

WARM_PARTS = ("models", "cache")  # config/engines/sparkengine.yaml: model_dir and caches
ENVS = "envs"  # flows/cluster/build/wheel.py: <workdir>/envs/<build>, one per installed build


class WarmNodes:
    """The session's store of prepared node folders (models, caches, installed builds), one per
    rank index.

    Models and caches are copied (a rank rewrites its caches). An installed build is hard-linked
    (hundreds of MB, never written once installed: Python replaces a bytecode file, it does not
    rewrite it), its interpreter link kept a link, so the environment works under its new path.
    """

    store: Path | None = None  # set for the session by the `warm_nodes` fixture

    @classmethod
    def seed(cls, workdirs: list[Path]) -> None:
        """Give new node workdirs (rank order) what earlier projects' nodes prepared."""
        if cls.store is None:
            return
        for index, workdir in enumerate(workdirs):
            source = cls.store / f"n{index}"
            if not source.is_dir():
                continue
            for part in WARM_PARTS:
                if (source / part).is_dir():
                    shutil.copytree(source / part, workdir / part, dirs_exist_ok=True)
            _link_builds(source / ENVS, workdir / ENVS)

    @classmethod
    def keep(cls, workdirs: list[Path]) -> None:
        """Add what these (stopped) nodes prepared to the store."""
        if cls.store is None:
            return
        for index, workdir in enumerate(workdirs):
            for part in WARM_PARTS:
                if (workdir / part).is_dir():
                    target = cls.store / f"n{index}" / part
                    shutil.copytree(workdir / part, target, dirs_exist_ok=True)
            _link_builds(workdir / ENVS, cls.store / f"n{index}" / ENVS)


def _link_builds(source: Path, target: Path) -> None:
    """Hard-link each finished install in `source` that `target` lacks (same build, same files).

    An install without its marker (one that was cut short) is left behind.
    """
    if not source.is_dir():
        return
    for build in sorted(source.iterdir()):
        if (build / MARKER).is_file() and not (target / build.name).exists():
            shutil.copytree(build, target / build.name, symlinks=True, copy_function=os.link)


@pytest.fixture(scope="session", autouse=True)
def warm_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The session's store of prepared node folders (see `WarmNodes`)."""
    WarmNodes.store = tmp_path_factory.mktemp("warm-nodes")
    yield WarmNodes.store
    WarmNodes.store = None


@pytest.fixture(scope="session")
def cluster_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Workdirs of the session's local nodes."""
    return tmp_path_factory.mktemp("nodes")


@pytest.fixture
def local_cluster(cluster_root: Path) -> Cluster:
    """config/local.yaml with private workdirs and fresh free ports."""
    shipped = load_model(ROOT / "config/local.yaml", Cluster)
    nodes = [
        node.model_copy(update={"workdir": str(cluster_root / node.name)}) for node in shipped.nodes
    ]
    ports = shipped.ports.model_copy(update={"rendezvous": free_port(), "api": free_port()})
    return shipped.model_copy(update={"nodes": nodes, "ports": ports})


@pytest.fixture(scope="session")
def release_r1() -> Release:
    """The shipped baseline release."""
    return load_model(ROOT / "releases/r1.yaml", Release)


def plans_for(cluster: Cluster, release: Release, **env: str) -> list[LaunchPlan]:
    """Launch plans with this interpreter (the dev env has the engine) and extra rank env."""
    plans = render_all(cluster, release, {"python": sys.executable})
    return [plan.model_copy(update={"env": {**plan.env, **env}}) for plan in plans]


def ensure_models(plans: list[LaunchPlan], release: Release) -> None:
    """Write each node's model directory once (seeded, so identical on every node)."""
    for plan in plans:
        if not Path(plan.model_dir, "config.json").exists():
            subprocess.run(
                [sys.executable, "-m", "sparkengine", "make-model", "--out", plan.model_dir,
                 "--seed", str(release.model.seed), "--size", release.model.size],
                check=True, capture_output=True,
            )  # fmt: skip


@pytest.fixture
def transports(local_cluster: Cluster) -> Iterator[dict[str, LocalTransport]]:
    """One local transport per node."""
    return {node.name: LocalTransport(node.name) for node in local_cluster.nodes}


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state folder for the module; the build cache is shared by the session's gate tests."""
    shared = tmp_path_factory.getbasetemp() / "gate-build-cache"
    shared.mkdir(exist_ok=True)
    folder = tmp_path_factory.mktemp("gate-state")
    (folder / "build-cache").symlink_to(shared)
    return folder


def context_for(
    cluster: Cluster,
    transports: dict[str, LocalTransport],
    state: Path,
    release: Release,
    previous: Release | None = None,
) -> GateContext:
    """The context a gate gets from the flow, on the test's private cluster."""
    return GateContext(
        cluster=cluster, release=release, previous=previous, transports=dict(transports),
        state=state, experiments=state / "experiments",
    )  # fmt: skip
