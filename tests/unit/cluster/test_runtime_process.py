"""The process runtime's own work on loopback: model preparation, caches, preflight facts and
the release tests' host (ship the built tree, list it, run pytest, keep the raw files)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from flows.cluster.boot.caches import CacheTarget
from flows.cluster.build.release_image import ImageBuild
from flows.cluster.build.source_image import BuiltImage
from flows.cluster.runtime.base import Installed, NodeInstall
from flows.cluster.runtime.factory import runtime_for
from flows.cluster.runtime.process import ProcessRuntime
from flows.cluster.runtime.pytest_host import TREE_MARKER, ship_tree
from flows.cluster.transport.local import LocalTransport
from flows.errors import BootError, BuildError, ClusterError
from flows.lines import silent
from flows.spec.cluster import Cluster
from flows.spec.launch import render_all
from flows.spec.load import load_model
from flows.spec.release import Release

ROOT = Path(__file__).resolve().parents[3]
PASSING = "def test_one():\n    assert 1 + 1 == 2\n"
FAILING = "def test_two():\n    assert 1 + 1 == 3\n"


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    """The local cluster with its node folders under tmp_path."""
    local = load_model(ROOT / "config" / "local.yaml", Cluster)
    nodes = [n.model_copy(update={"workdir": str(tmp_path / n.name)}) for n in local.nodes]
    return local.model_copy(update={"nodes": nodes})


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    """A tiny engine tree: pytest configuration and one passing test file."""
    folder = tmp_path / "engine"
    (folder / "tests").mkdir(parents=True)
    (folder / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (folder / "tests" / "test_ok.py").write_text(PASSING)
    return folder


@pytest.fixture
def release(engine: Path) -> Release:
    r1 = load_model(ROOT / "releases" / "r1.yaml", Release)
    return r1.model_copy(update={"build": r1.build.model_copy(update={"source": engine})})


def _runtime(cluster: Cluster, release: Release | None = None) -> ProcessRuntime:
    transports = {n.name: LocalTransport(n.name) for n in cluster.nodes}
    runtime = runtime_for(cluster, transports, release=release)
    assert isinstance(runtime, ProcessRuntime)
    return runtime


def _installed(cluster: Cluster, python: str = sys.executable) -> Installed:
    nodes = [NodeInstall(node=n.name, reused=False, python=python) for n in cluster.nodes]
    return Installed(runtime="process", release="r1", digest="ab" * 32, nodes=nodes, summary=[])


def test_the_factory_picks_the_runtime_of_the_cluster_file(cluster: Cluster) -> None:
    assert _runtime(cluster).kind == "process"
    docker = Cluster.model_validate(cluster.model_dump() | {"runtime": {"kind": "docker"}})
    assert runtime_for(docker, {}).kind == "docker"


def test_launch_values_carry_the_installed_python(cluster: Cluster) -> None:
    installed = _installed(cluster, "/envs/x/bin/python")
    assert installed.launch_values("local0") == {"python": "/envs/x/bin/python"}
    assert installed.launch_values("elsewhere") == {}


def test_a_model_is_prepared_on_the_node_and_a_failure_says_so(
    cluster: Cluster, release: Release, tmp_path: Path
) -> None:
    plan = render_all(cluster, release)[0]
    Path(plan.cwd).mkdir(parents=True, exist_ok=True)
    made = tmp_path / "made"
    runtime = _runtime(cluster)
    runtime.prepare_model(plan.model_copy(update={"model_prepare": ["touch", str(made)]}), 30)
    assert made.is_file()
    with pytest.raises(BuildError, match="model preparation failed"):
        runtime.prepare_model(plan.model_copy(update={"model_prepare": ["false"]}), 30)
    with pytest.raises(BuildError, match="no model_prepare"):
        runtime.prepare_model(plan.model_copy(update={"model_prepare": []}), 30)


def test_caches_are_emptied_through_the_runtime(cluster: Cluster, tmp_path: Path) -> None:
    cache = tmp_path / "local0" / "cache" / "kernels"
    cache.mkdir(parents=True)
    (cache / "kernel.bin").write_text("x")
    target = CacheTarget(node="local0", rank=0, kind="kernels", path=str(cache))
    _runtime(cluster).empty_caches([target])
    assert cache.is_dir()
    assert list(cache.iterdir()) == []


def test_node_facts_report_the_base_python_or_why_not(cluster: Cluster) -> None:
    node = cluster.nodes[0]
    runtime = _runtime(cluster)
    facts = runtime.node_facts(node, {"python": sys.executable})
    assert str(facts["python_version"]).startswith("Python 3.")
    broken = runtime.node_facts(node, {"python": "/nonexistent/python"})
    assert "python_error" in broken


def test_only_wheels_are_installed_by_the_process_runtime(cluster: Cluster) -> None:
    built = BuiltImage(tag="e:1-r1", image_id="sha256:1", source_digest="1", reused=True, seconds=0)
    image = ImageBuild(built=built, base_image="b", lock_digest="l", seconds={})
    with pytest.raises(ClusterError, match="installs wheels"):
        _runtime(cluster).install(image, silent)


def test_building_needs_a_state_folder(cluster: Cluster, release: Release) -> None:
    with pytest.raises(ClusterError, match="state folder"):
        _runtime(cluster).build(release, silent)


def test_the_tree_is_shipped_once_per_digest(tmp_path: Path, engine: Path) -> None:
    transport = LocalTransport("local0")
    files = {"tests/test_ok.py": engine / "tests" / "test_ok.py"}
    tree = Path(ship_tree("cd" * 32, files, transport, str(tmp_path / "node")))
    assert (tree / TREE_MARKER).is_file()
    (tree / "tests" / "test_ok.py").write_text("# changed on the node\n")
    ship_tree("cd" * 32, files, transport, str(tmp_path / "node"))
    assert (tree / "tests" / "test_ok.py").read_text() == "# changed on the node\n"
    ship_tree("ef" * 32, files, transport, str(tmp_path / "node"))
    assert (tmp_path / "node" / "envs" / ("ef" * 6) / "engine" / "tests" / "test_ok.py").is_file()


def test_release_tests_list_the_built_tree_and_run_pytest_with_the_overlay(
    cluster: Cluster, release: Release, tmp_path: Path
) -> None:
    lines: list[str] = []
    host = _runtime(cluster, release).release_tests("local0", _installed(cluster), lines.append)
    assert host.node == "local0"
    assert host.list_tree() == ["tests/test_ok.py"]
    overlay = tmp_path / "overlay.py"
    overlay.write_text(FAILING)
    gate = ["tests/test_ok.py", "tests/test_new.py"]
    run = host.run_pytest(gate, {"tests/test_new.py": overlay}, tmp_path / "out", timeout=120)
    assert run.rc == 1
    assert run.files == ["pytest.txt", "junit.xml"]
    assert run.junit_xml is not None
    assert 'name="test_one"' in run.junit_xml
    assert "<failure" in run.junit_xml
    assert (tmp_path / "out" / "pytest.txt").read_text() == run.output
    assert lines == ["local0: pytest on 2 gate files"]
    assert list((tmp_path / "local0" / "release-tests").iterdir()) == []


def test_release_tests_need_the_build_on_the_node(cluster: Cluster, release: Release) -> None:
    installed = _installed(cluster).model_copy(update={"nodes": []})
    with pytest.raises(ClusterError, match="not installed"):
        _runtime(cluster, release).release_tests("local0", installed, silent)


def test_a_rank_is_not_started_below_the_startup_memory_guard_and_runs_guarded_above_it(
    cluster: Cluster, release: Release
) -> None:
    """The recipe's memguard on the process runtime: a start below the startup threshold is
    refused on that node with the reading; above it the rank runs with its guard, which stops
    with the rank."""
    guard = {"startup_gib": 1e6, "steady_gib": 1e6, "startup_interval_s": 0.1}
    runtime_spec = cluster.runtime.model_dump() | {"memory_guard": guard}
    refused = Cluster.model_validate(cluster.model_dump() | {"runtime": runtime_spec})
    plan = render_all(refused, release)[0].model_copy(update={"argv": ["sleep", "30"]})
    runtime = _runtime(refused)
    runtime.prepare(plan)
    with pytest.raises(BootError, match=r"node local0: refusing to start rank 0: MemAvailable "
                       r"[\d.]+ GiB is below the startup memory guard of 1e\+06 GiB"):  # fmt: skip
        runtime.start(plan)
    guard |= {"startup_gib": 0.001, "steady_gib": 0.001}
    runtime_spec = cluster.runtime.model_dump() | {"memory_guard": guard}
    guarded = Cluster.model_validate(cluster.model_dump() | {"runtime": runtime_spec})
    runtime = _runtime(guarded)
    handle = runtime.start(plan)
    try:
        threading.Event().wait(0.5)  # the guard checks several times
        assert runtime.status(handle).running
    finally:
        ended = runtime.stop(handle)
    assert not ended.running
    assert ended.detail == ""  # stopped on purpose, not by the guard
