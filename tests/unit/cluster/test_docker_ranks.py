"""The docker runtime's pure parts, and a handle read back by another process, without a daemon.

The daemon is replaced by a small fake inside these tests only; tests/lab/test_lab_docker_boot.py
runs the same adapter against real daemons.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from docker.errors import DockerException, NotFound

from flows.cluster.boot.session import ClusterSession, load_session, save_session
from flows.cluster.boot.timeline import BootTimeline
from flows.cluster.build.distribute import ImageFacts, NodeImage
from flows.cluster.build.progress import LineProgress, NullProgress
from flows.cluster.build.release_image import ImageBuild
from flows.cluster.build.source_image import BuiltImage
from flows.cluster.build.wheel import ProcessBuild
from flows.cluster.runtime import docker as docker_ranks
from flows.cluster.runtime.base import Installed, RankHandle
from flows.cluster.runtime.containers import RankContainer, create_options
from flows.cluster.runtime.docker import (
    DockerRanks,
    cluster_mounts,
    node_daemons,
    owned_folders,
    rank_container,
    rank_status,
    run_arg_options,
)
from flows.cluster.runtime.docker_tests import container_argv, image_tree
from flows.cluster.runtime.factory import check_fits, runtime_for
from flows.errors import ClusterError, SpecError
from flows.lines import silent
from flows.spec.cluster import Cluster
from flows.spec.launch import render_all
from flows.spec.load import load_model
from flows.spec.release import Release

ROOT = Path(__file__).resolve().parents[3]
RING = ROOT / "config" / "examples" / "tp4-ring.yaml"


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    """Two local ranks in Docker, with one extra mount and a few run_args."""
    path = tmp_path / "docker.yaml"
    path.write_text(
        f"kind: cluster\nextends: {ROOT / 'config' / 'local.yaml'}\nset:\n"
        "  name: dock\n"
        "  runtime:\n"
        "    kind: docker\n"
        "    container_name: sg-{node}-r{rank}\n"
        "    run_args: [--ipc=host, --shm-size, 1g, --cap-add=IPC_LOCK]\n"
        "    mounts: [{source: '{workdir}/hub', target: /hub}]\n"
    )
    return load_model(path, Cluster)


@pytest.fixture
def release() -> Release:
    return load_model(ROOT / "releases" / "r1.yaml", Release)


def test_daemons_are_filled_from_the_template_without_a_release() -> None:
    ring = load_model(RING, Cluster)
    daemons = node_daemons(ring)
    assert daemons["dgx2"].base_url == "ssh://swank@10.0.1.72"
    assert list(daemons) == ["dgx1", "dgx2", "dgx3", "dgx4"]


def test_a_process_cluster_has_no_daemons() -> None:
    with pytest.raises(ClusterError, match="processes, not in Docker"):
        node_daemons(load_model(ROOT / "config" / "local.yaml", Cluster))


def test_a_rank_container_mounts_workdir_caches_and_the_cluster_mounts(
    cluster: Cluster, release: Release
) -> None:
    plan = render_all(cluster, release)[1]
    spec = rank_container(cluster, release, cluster.node(plan.node), plan, "sparkengine:abc-r1")
    assert spec.name == f"sg-{plan.node}-r1"
    assert spec.argv[:3] == ("python", "-m", "sparkengine")
    assert spec.release == "r1"
    sources = {m.source: m for m in spec.mounts}
    assert set(sources) >= {plan.workdir, *plan.cache_dirs.values(), f"{plan.workdir}/hub"}
    assert sources[f"{plan.workdir}/hub"].target == "/hub"
    assert sources[f"{plan.workdir}/hub"].read_only
    assert all(sources[path].target == path for path in plan.cache_dirs.values())
    options = create_options(spec)
    assert options["network_mode"] == "host"
    assert options["ipc_mode"] == "host"
    assert options["shm_size"] == "1g"
    assert options["cap_add"] == ["IPC_LOCK"]
    assert options["stop_signal"] == plan.stop_signal
    assert options["working_dir"] == plan.cwd
    assert options["labels"]["io.sparkgate.rank"] == "1"


def test_the_cache_folders_and_the_model_parent_go_to_the_image_user(
    cluster: Cluster, release: Release
) -> None:
    plan = render_all(cluster, release)[0]
    folders = owned_folders(plan)
    assert folders == [*plan.cache_dirs.values(), str(Path(plan.model_dir).parent)]


def test_the_ring_run_args_become_sdk_options() -> None:
    options = run_arg_options(load_model(RING, Cluster).runtime.run_args)  # type: ignore[union-attr]
    assert options["ipc_mode"] == "host"
    assert options["devices"] == ["/dev/infiniband"]
    assert options["device_requests"][0]["Count"] == -1
    assert options["ulimits"][0]["Name"] == "memlock"
    assert options["ulimits"][0]["Soft"] == -1
    assert (options["mem_limit"], options["memswap_limit"]) == ("112g", "112g")
    assert "network_mode" not in options
    # the GB10 display device for SPARK3_DISPLAY_CARVEOUT_WEIGHTS=1 (R4's docker_run_args)
    assert options["device_cgroup_rules"] == ["c 226:* rw"]
    (display,) = options["mounts"]
    assert (display["Type"], display["Target"]) == ("bind", "/dev/dri/card0")
    assert display["Source"] == "/dev/dri/by-path/pci-000f:01:00.0-card"
    assert display["ReadOnly"] is False


def test_a_cpu_set_and_a_read_only_mount_pass_through() -> None:
    options = run_arg_options(
        ["--cpuset-cpus=0-9", "--mount", "type=bind,src=/opt/x,dst=/x,readonly"]
    )
    assert options["cpuset_cpus"] == "0-9"
    assert options["mounts"][0]["ReadOnly"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--network=bridge"], "host networking only"),
        (["--rm"], "--rm: not supported"),
        (["--memory"], "missing value"),
        (["--mount=type=bind,source=/a"], "want type=bind|volume|tmpfs"),
        (["--mount=type=bind,source=/a,target=/b,propagation=shared"], "unknown: propagation"),
    ],
)
def test_run_args_the_runtime_cannot_honour_are_refused(args: list[str], message: str) -> None:
    with pytest.raises(ClusterError, match=message):
        run_arg_options(args)


def test_status_from_an_inspect_document() -> None:
    assert rank_status({"State": {"Running": True}}).running
    ended = rank_status({"State": {"Running": False, "ExitCode": 137, "OOMKilled": True}})
    assert (ended.running, ended.exit_code, ended.oom_killed) == (False, 137, True)
    assert ended.describe() == "killed by the OOM killer"
    assert rank_status(None).describe() == "gone (exit status unknown)"


class FakeApi:
    """Just enough of docker's low-level API for status, logs and stop of one container."""

    def __init__(self) -> None:
        self.running = True
        self.removed = False
        self.calls: list[tuple[str, object]] = []

    def inspect_container(self, name: str) -> dict[str, Any]:
        if self.removed or name != "c0ffee":
            raise NotFound("no such container")
        state = {"Running": self.running, "ExitCode": 0 if self.running else 143}
        return {"Id": "c0ffee", "Name": "/sg-local0-r0", "State": state}

    def logs(self, name: str, **options: object) -> bytes:
        assert options["timestamps"] is True
        return "2026-12-02T10:00:00.000000001Z é ready\n".encode()

    def stop(self, name: str, timeout: int) -> None:
        self.calls.append(("stop", timeout))
        self.running = False

    def remove_container(self, name: str, force: bool) -> None:
        self.calls.append(("remove", name))
        self.removed = True


class FakeClient:
    def __init__(self) -> None:
        self.api = FakeApi()


def test_a_handle_saved_by_start_is_found_by_another_process(
    cluster: Cluster, release: Release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = render_all(cluster, release)[0]
    handle = RankHandle(
        runtime="docker", node=plan.node, rank=0, head=True, started_at=datetime.now(UTC),
        plan=plan, container="sg-local0-r0", container_id="c0ffee",
        daemon="unix:///run/node0.sock", image="sparkengine:abc-r1",
    )  # fmt: skip
    timeline = BootTimeline(started_at=handle.started_at, ready_s=1.0, ranks=[])
    session = ClusterSession(
        cluster="dock", release="r1", runtime="docker", build="sha256:1", image=handle.image,
        started_at=handle.started_at, handles=[handle], timeline=timeline,
    )  # fmt: skip
    save_session(tmp_path, session)
    loaded = load_session(tmp_path, "dock")
    assert loaded == session

    client = FakeClient()
    endpoints: list[str] = []

    def connect(endpoint: Any) -> FakeClient:
        endpoints.append(endpoint.base_url)
        return client

    monkeypatch.setattr(docker_ranks, "connect", connect)
    runtime = runtime_for(cluster, {})  # what `cluster stop` builds: no release, no image
    assert isinstance(runtime, DockerRanks)
    assert loaded is not None
    found = loaded.handles[0]
    assert runtime.status(found).running
    log = runtime.read_log(found)
    assert log.endswith("é ready\n")
    assert runtime.read_log(found, len(log.encode()) - len("ready\n")) == "ready\n"
    ended = runtime.stop(found)
    assert (ended.running, ended.exit_code) == (False, 143)
    assert client.api.calls == [("stop", 10), ("remove", "c0ffee")]
    assert runtime.status(found) == ended  # removed, but its end is remembered
    assert runtime.read_log(found) == ""
    assert endpoints == ["unix:///run/node0.sock"]


def test_starting_needs_the_release_image(cluster: Cluster, release: Release) -> None:
    runtime = DockerRanks(cluster, {}, release=release)
    with pytest.raises(ClusterError, match="no release image"):
        runtime.start(render_all(cluster, release)[0])


def test_the_image_tree_listing_and_the_test_container_command() -> None:
    output = "/opt/engine/tests/test_a.py\n/opt/engine/pyproject.toml\nfind: warning\n"
    assert image_tree(output) == ["pyproject.toml", "tests/test_a.py"]
    argv = container_argv("python", "/w/release-tests/1", ["tests/test_a.py"])
    assert argv[:2] == ["sh", "-c"]
    assert 'cp -R "/opt/engine/." "$0/tree/"' in argv[2]
    assert argv[3] == "/w/release-tests/1"
    assert argv[4:7] == ["python", "-m", "pytest"]
    assert "--junitxml=/w/release-tests/1/tree/junit.xml" in argv
    assert argv[-1] == "tests/test_a.py"


def test_the_recipe_runs_its_release_tests_from_the_candidate_tree_in_its_image() -> None:
    ring = load_model(RING, Cluster)
    assert ring.engine.tests_root == "/opt/spark3/candidate/vllm"
    argv = container_argv("python3", "/w/t", ["tests/kernels/test_x.py"], ring.engine.tests_root)
    assert 'cp -R "/opt/spark3/candidate/vllm/." "$0/tree/"' in argv[2]
    listed = "/opt/spark3/candidate/vllm/tests/kernels/test_x.py\n/opt/engine/x.py\n"
    assert image_tree(listed, ring.engine.tests_root) == ["tests/kernels/test_x.py"]


def _image_build() -> ImageBuild:
    built = BuiltImage(
        tag="sparkengine:abc-r1", image_id="sha256:1", source_digest="abc", reused=True, seconds=0
    )
    return ImageBuild(built=built, base_image="base", lock_digest="lock", seconds={})


def test_the_docker_runtime_installs_images_of_a_given_release(
    cluster: Cluster, release: Release, tmp_path: Path
) -> None:
    wheel = ProcessBuild(
        release="r1", digest="ab" * 32, wheelhouse=tmp_path, engine_wheel=tmp_path / "e.whl",
        lock="",
    )  # fmt: skip
    with pytest.raises(ClusterError, match="installs images"):
        DockerRanks(cluster, {}, release=release).install(wheel, silent)
    with pytest.raises(ClusterError, match="no release given to install"):
        DockerRanks(cluster, {}).install(_image_build(), silent)
    with pytest.raises(ClusterError, match="state folder"):
        DockerRanks(cluster, {}).build(release, silent)


def test_the_install_draws_with_the_given_progress_and_keeps_each_nodes_verified_image(
    cluster: Cluster, release: Release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sparkgate image build` hands the runtime its bars and shows every node's copy."""
    drawn: list[object] = []

    def distribute_for(*args: Any, **_: Any) -> list[NodeImage]:
        drawn.append(args[3])
        return [
            NodeImage(facts=ImageFacts(node=node.name, image_id="sha256:1", layers=(),
                                       config_digest="", size=0), match="same-id")
            for node in cluster.nodes
        ]  # fmt: skip

    monkeypatch.setattr(docker_ranks, "distribute_for", distribute_for)
    bars = NullProgress()
    runtime = runtime_for(cluster, {}, tmp_path, release=release, progress=bars)
    installed = runtime.install(_image_build(), silent)
    assert drawn == [bars]
    assert [n.verified.facts.node for n in installed.nodes if n.verified] == ["local0", "local1"]
    DockerRanks(cluster, {}, release=release).install(_image_build(), silent)
    assert isinstance(drawn[1], LineProgress)  # without bars: a line per step


def test_release_tests_need_an_installed_image(cluster: Cluster, release: Release) -> None:
    installed = Installed(
        runtime="docker", release="r1", digest="sha256:1", nodes=[], summary=[]
    )  # the image tag is missing
    with pytest.raises(ClusterError, match="no release image installed"):
        DockerRanks(cluster, {}, release=release).release_tests("local0", installed, silent)


def test_only_release_test_containers_get_the_cluster_run_args(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[RankContainer] = []

    def run_once(client: object, spec: RankContainer, timeout: float) -> tuple[int, str]:
        seen.append(spec)
        return 0, ""

    monkeypatch.setattr(docker_ranks, "run_once", run_once)
    monkeypatch.setattr(docker_ranks, "connect", lambda _endpoint: FakeClient())
    runtime = DockerRanks(cluster, {}, image="sparkengine:abc-r1")
    runtime.one_shot("local0", "model", ["true"], [], 10)
    runtime.one_shot("local0", "release-tests", ["true"], [], 10, with_run_args=True)
    assert seen[0].options == {}
    assert seen[1].options == {"ipc_mode": "host", "shm_size": "1g", "cap_add": ["IPC_LOCK"]}


def test_node_facts_name_the_daemon_version_or_why_not(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = cluster.nodes[0]
    values = {"user": "", "address": node.address, "node": node.name, "rank": "0"}
    runtime = DockerRanks(cluster, {})
    monkeypatch.setattr(docker_ranks, "daemon_version", lambda _node, _url: "27.1")
    assert runtime.node_facts(node, values) == {"docker_version": "27.1"}

    def refuse(_node: str, url: str) -> str:
        raise DockerException("connection refused")

    monkeypatch.setattr(docker_ranks, "daemon_version", refuse)
    error = runtime.node_facts(node, values)["docker_error"]
    assert "connection refused" in str(error)


def test_a_run_arg_the_runtime_would_drop_is_refused_before_anything_starts() -> None:
    ring = load_model(RING, Cluster)
    runtime = ring.runtime.model_copy(update={"run_args": ["--ipc=host", "--rm"]})
    release = load_model(ROOT / "examples/spark-ds41f/releases/ring/r6x.yaml", Release)
    with pytest.raises(SpecError, match="--rm: not supported") as raised:
        check_fits(ring.model_copy(update={"runtime": runtime}), release)
    assert raised.value.key == "runtime.run_args"
    check_fits(ring, release)  # the recipe's own arguments all pass


def test_a_mount_naming_the_revision_follows_the_release_or_is_refused_before_a_start() -> None:
    """`.../snapshots/{model_revision}` mounts the snapshot the release names; a release that
    names none would mount `.../snapshots/` silently, so it is refused at the mount's key."""
    ring = load_model(RING, Cluster)
    runtime = ring.runtime.model_copy(deep=True)
    assert runtime.kind == "docker"
    first = runtime.mounts[0]
    runtime.mounts[0] = first.model_copy(
        update={"source": first.source.rsplit("/", 1)[0] + "/{model_revision}"}
    )
    following = ring.model_copy(update={"runtime": runtime})
    r6x = load_model(ROOT / "examples/spark-ds41f/releases/ring/r6x.yaml", Release)
    check_fits(following, r6x)
    assert cluster_mounts(following, r6x, following.nodes[1])[0].source.endswith(
        f"/snapshots/{r6x.model.revision}"
    )
    model = r6x.model.model_copy(update={"checkpoint": None, "revision": None})
    bare = r6x.model_copy(update={"model": model})
    with pytest.raises(SpecError, match=r"names \{model_revision\}, but release r6x sets no") as e:
        check_fits(following, bare)
    assert e.value.key == "runtime.mounts[0].source"
