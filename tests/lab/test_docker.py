"""Docker for real: three private daemons, the engine image built once, distributed, run, removed.

Needs root, dockerd and debootstrap (CI installs them; elsewhere these tests skip with the
reason). The base rootfs and the wheelhouse are cached under .sparkgate/cache/docker, so only the
first run pays for debootstrap and pip download; the daemons are fresh for every run, so the
build and the distribution are always real.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import pytest

from flows.cli import main
from flows.cluster.build.distribute import distribute_image
from flows.cluster.build.release_image import ReleaseImage, build_on, distribute_built
from flows.cluster.lab.dockerd import (
    DockerDaemon,
    daemon_root,
    remove_daemon_state,
    start_dockerd,
    stop_dockerd,
)
from flows.cluster.runtime.containers import (
    BindMount,
    RankContainer,
    cluster_containers,
    inspect_document,
    inspect_rank,
    rank_logs,
    remove_cluster,
    run_rank,
    stop_rank,
    wait_rank,
)
from flows.cluster.transport.docker_client import DockerEndpoint, connect
from flows.errors import BuildError, ClusterError
from tests.support.net import free_port
from tests.support.overlays import release_overlay
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / ".sparkgate"
CACHE = STATE / "cache" / "docker"
ENGINE = ROOT / "engine"
CLUSTER = "docker-test"
ENGINE_UID = 10001


def missing_requirement() -> str | None:
    if os.geteuid() != 0:
        return "docker tests need root (private dockerd, bind mounts)"
    for tool in ("dockerd", "debootstrap", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (.ci/run installs docker.io, debootstrap, iproute2)"
    return None


class Recorder:
    """An ImageProgress that remembers what it was told."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.steps: list[tuple[int, int]] = []
        self.build_ok: bool | None = None
        self.sent: dict[str, int] = {}
        self.done: dict[str, bool] = {}

    def build_step(self, step: int, total: int, instruction: str) -> None:
        self.steps.append((step, total))

    def build_output(self, line: str) -> None:
        pass

    def build_done(self, ok: bool) -> None:
        self.build_ok = ok

    def transfer_start(self, node: str, total_bytes: int) -> None:
        with self.lock:
            self.sent[node] = 0

    def transfer_advance(self, node: str, sent_bytes: int) -> None:
        with self.lock:
            self.sent[node] += sent_bytes

    def transfer_done(self, node: str, ok: bool) -> None:
        with self.lock:
            self.done[node] = ok


@pytest.fixture(scope="module")
def daemons() -> Iterator[list[DockerDaemon]]:
    reason = missing_requirement()
    if reason:
        pytest.skip(reason)
    remove_dead_test_daemons()
    started: list[DockerDaemon] = []
    try:
        for index in range(1, 4):
            started.append(start_dockerd(f"t{os.getpid()}n{index}", STATE))
        yield started
    finally:
        with ThreadPoolExecutor(max_workers=3) as pool:
            list(pool.map(tear_down, started))


def remove_dead_test_daemons() -> None:
    """Folders of earlier test daemons whose process is gone (a killed run): unmount, delete.

    Folders are named `t<test pid>...`: a folder whose test process or daemon still runs is left
    alone, whoever started it.
    """
    for root in sorted((STATE / "docker").glob("t[0-9]*")):
        owner = re.match(r"t(\d+)", root.name)
        pid_file = root / "dockerd.pid"
        pids = [int(owner[1])] if owner else []
        if pid_file.is_file() and pid_file.read_text().strip().isdigit():
            pids.append(int(pid_file.read_text()))
        if any(Path(f"/proc/{pid}").exists() and not _zombie(pid) for pid in pids):
            continue
        for line in reversed(Path("/proc/self/mountinfo").read_text().splitlines()):
            point = line.split()[4]
            if point == str(root) or point.startswith(f"{root}/"):
                subprocess.run(["umount", "-l", point], check=False)
        shutil.rmtree(root, ignore_errors=True)


def tear_down(daemon: DockerDaemon) -> None:
    with contextlib.suppress(Exception):
        remove_cluster(docker.DockerClient(base_url=daemon.base_url), CLUSTER, 1)
    stop_dockerd(daemon)
    remove_daemon_state(daemon)


@pytest.fixture(scope="module")
def endpoints(daemons: list[DockerDaemon]) -> list[DockerEndpoint]:
    return [DockerEndpoint(node=d.name, base_url=d.base_url) for d in daemons]


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def engine_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A snapshot of engine/: the checkout may change while the module runs."""
    copy = tmp_path_factory.mktemp("source") / "engine"
    shutil.copytree(ENGINE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return copy


def built_everywhere(
    endpoints: list[DockerEndpoint], engine_source: Path, recorder: Recorder
) -> ReleaseImage:
    """r1's image built on the first daemon and verified on all: release_image's two parts."""
    build = build_on(endpoints[0], "r1", engine_source, CACHE, progress=recorder)
    started = time.monotonic()
    nodes = distribute_built(endpoints[0], endpoints[1:], build, recorder)
    seconds = {**build.seconds, "distribute": time.monotonic() - started}
    return ReleaseImage(
        built=build.built, base_image=build.base_image, lock_digest=build.lock_digest,
        nodes=tuple(nodes), seconds=seconds,
    )  # fmt: skip


@pytest.fixture(scope="module")
def release_image(
    endpoints: list[DockerEndpoint], recorder: Recorder, engine_source: Path
) -> ReleaseImage:
    started = time.monotonic()
    result = built_everywhere(endpoints, engine_source, recorder)
    timings = {name: round(value, 1) for name, value in result.seconds.items()}
    print(f"\nbuild once + distribute: {time.monotonic() - started:.1f} s {timings}")
    return result


def test_each_daemon_is_private(daemons: list[DockerDaemon]) -> None:
    assert len({d.socket for d in daemons}) == 3
    for daemon in daemons:
        info = connect(DockerEndpoint(node=daemon.name, base_url=daemon.base_url)).info()
        assert info["DockerRootDir"] == str(daemon.data_root)
        assert info["Driver"] == daemon.storage_driver
        assert daemon.data_root.is_relative_to(STATE)


def test_engine_image_builds_from_the_debootstrap_base_and_wheelhouse(
    release_image: ReleaseImage, endpoints: list[DockerEndpoint], recorder: Recorder
) -> None:
    built = release_image.built
    assert re.fullmatch(r"sparkengine:[0-9a-f]{12}-r1", built.tag)
    assert built.tag.split(":")[1][:12] == built.source_digest[:12]
    assert release_image.base_image.startswith("sparkgate-base:bookworm-")
    inspect = connect(endpoints[0]).api.inspect_image(built.tag)
    assert inspect["Config"]["User"] == "engine"
    assert inspect["Config"]["Entrypoint"] == ["python", "-m", "sparkengine"]
    assert inspect["Config"]["Labels"]["org.opencontainers.image.revision"] == built.source_digest
    assert recorder.build_ok is True
    assert recorder.steps
    assert recorder.steps[-1][0] == recorder.steps[-1][1]


def test_every_node_holds_the_same_image_id(
    release_image: ReleaseImage, endpoints: list[DockerEndpoint], recorder: Recorder
) -> None:
    nodes = release_image.nodes
    assert [n.facts.node for n in nodes] == [e.node for e in endpoints]
    assert {n.facts.image_id for n in nodes} == {release_image.built.image_id}
    assert all(n.match == "same-id" for n in nodes)
    for endpoint in endpoints[1:]:
        assert recorder.done[endpoint.node] is True
        assert recorder.sent[endpoint.node] > 100_000_000


def test_the_same_inputs_reuse_the_tag_everywhere(
    release_image: ReleaseImage, endpoints: list[DockerEndpoint], engine_source: Path
) -> None:
    recorder = Recorder()
    again = built_everywhere(endpoints, engine_source, recorder)
    assert again.built.reused
    assert (again.built.tag, again.built.image_id) == (
        release_image.built.tag,
        release_image.built.image_id,
    )
    assert recorder.steps == []
    assert recorder.sent == {endpoints[1].node: 0, endpoints[2].node: 0}
    assert {n.facts.image_id for n in again.nodes} == {release_image.built.image_id}


def test_the_cli_builds_for_a_docker_cluster_file(
    release_image: ReleaseImage,
    daemons: list[DockerDaemon],
    engine_source: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`sparkgate image build` with the three daemons as a cluster: the same tag, reused."""
    nodes = "".join(
        f"""
    - name: {daemon.name}
      rank: {rank}
      head: {str(rank == 0).lower()}
      address: 127.0.0.1
      workdir: {tmp_path / daemon.name}
      overrides: {{docker_daemon: "{daemon.base_url}"}}"""
        for rank, daemon in enumerate(daemons)
    )
    cluster = tmp_path / "docker.yaml"
    cluster.write_text(
        f"kind: cluster\nextends: {ROOT / 'config' / 'local.yaml'}\nset:\n  name: docker-lab\n"
        f"  shape: tp3-local\n  runtime: {{kind: docker}}\n  nodes:{nodes}\n"
    )
    # the release sits beside the engine snapshot: a spec's paths stay inside its project
    release = release_overlay(
        engine_source.parent / "r1.yaml", build={"source": str(engine_source)}
    )
    capsys.readouterr()
    assert main(["image", "build", str(release), "--cluster", str(cluster), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["built"]["tag"] == release_image.built.tag
    assert result["built"]["reused"] is True
    assert [n["facts"]["node"] for n in result["nodes"]] == [d.name for d in daemons]


def test_a_node_whose_tag_names_another_image_is_never_overwritten(
    release_image: ReleaseImage, endpoints: list[DockerEndpoint]
) -> None:
    tag = "sparkengine:conflict-r1"
    connect(endpoints[0]).api.tag(release_image.built.image_id, "sparkengine", "conflict-r1")
    third = connect(endpoints[2])
    third.api.import_image_from_data(one_file_tar(), repository="sparkengine", tag="conflict-r1")
    other_id = third.api.inspect_image(tag)["Id"]
    try:
        with pytest.raises(BuildError, match=rf"{endpoints[2].node}.*never overwritten"):
            distribute_image(endpoints[0], endpoints[2:], tag)
        assert third.api.inspect_image(tag)["Id"] == other_id
    finally:
        for endpoint in endpoints:
            with contextlib.suppress(docker.errors.ImageNotFound):
                connect(endpoint).api.remove_image(tag)


def one_file_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models")
    os.chown(folder, ENGINE_UID, ENGINE_UID)
    return folder


def test_a_rank_container_runs_the_engine_as_non_root(
    release_image: ReleaseImage, endpoints: list[DockerEndpoint], models: Path
) -> None:
    node = endpoints[2]
    client = connect(node)
    spec = RankContainer(
        cluster=CLUSTER,
        node=node.node,
        rank=2,
        image=release_image.built.tag,
        name=f"sparkgate-{CLUSTER}-make-model",
        argv=("python", "-m", "sparkengine", "make-model", "--out", "/models/tiny", "--seed", "3"),
        env={"PYTHONHASHSEED": "0"},
        mounts=(BindMount(source=str(models), target="/models"),),
        release="r1",
    )
    run_rank(client, spec)
    assert wait_rank(client, spec.name, timeout=120) == 0
    state = inspect_rank(client, spec.name)
    assert state is not None
    assert (state.running, state.exit_code, state.oom_killed) == (False, 0, False)
    assert state.labels["io.sparkgate.rank"] == "2"
    assert {p.name for p in (models / "tiny").iterdir()} >= {"config.json", "model.safetensors"}
    assert (models / "tiny" / "config.json").stat().st_uid == ENGINE_UID
    logs = rank_logs(client, spec.name)
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", line) for line in logs.splitlines())
    assert [s.name for s in cluster_containers(client, CLUSTER)] == [spec.name]
    assert remove_cluster(client, CLUSTER) == [spec.name]
    assert cluster_containers(client, CLUSTER) == []


def test_three_ranks_boot_in_containers_on_three_daemons_and_stop(
    release_image: ReleaseImage,
    endpoints: list[DockerEndpoint],
    models: Path,
    tmp_path: Path,
) -> None:
    if not (models / "tiny" / "config.json").is_file():
        pytest.skip("needs the model written by the make-model container test")
    head_port, http_port = free_port(), free_port()
    clients = [connect(endpoint) for endpoint in endpoints]
    specs = []
    for rank, endpoint in enumerate(endpoints):
        caches = tmp_path / f"rank{rank}"
        caches.mkdir()
        os.chown(caches, ENGINE_UID, ENGINE_UID)
        specs.append(
            RankContainer(
                cluster=CLUSTER,
                node=endpoint.node,
                rank=rank,
                image=release_image.built.tag,
                name=f"sparkgate-{CLUSTER}-rank{rank}",
                argv=(
                    *("python", "-m", "sparkengine", "serve", "--rank", str(rank)),
                    *("--nnodes", "3", "--head", f"127.0.0.1:{head_port}"),
                    *("--port", str(http_port), "--model", "/models/tiny"),
                    *("--cache", "kernels=/caches/kernels", "--cache", "jit=/caches/jit"),
                ),
                mounts=(
                    BindMount(source=str(models), target="/models", read_only=True),
                    BindMount(source=str(caches), target="/caches"),
                ),
                release="r1",
            )
        )
    try:
        for client, spec in reversed(list(zip(clients, specs, strict=True))):
            run_rank(client, spec)
        health = wait_for_health(http_port, clients, specs, timeout=240)
        assert health == 200
        models_doc = json.loads(http_get(http_port, "/v1/models")[1])
        assert models_doc["data"]
        for client, spec in zip(clients, specs, strict=True):
            stop_rank(client, spec.name, grace_s=10)
        for client, spec in zip(clients, specs, strict=True):
            state = inspect_rank(client, spec.name)
            assert state is not None
            assert not state.running
            assert not state.oom_killed
            assert list((tmp_path / f"rank{spec.rank}" / "kernels").iterdir())
        assert '"event":"ready"' in rank_logs(clients[0], specs[0].name)
    finally:
        removed = [remove_cluster(client, CLUSTER, grace_s=1) for client in clients]
    assert sorted(name for names in removed for name in names) == sorted(s.name for s in specs)
    assert all(cluster_containers(client, CLUSTER) == [] for client in clients)


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), ""


def wait_for_health(
    port: int, clients: list[docker.DockerClient], specs: list[RankContainer], timeout: float
) -> int:
    """Poll /health; fail at once, with the rank's logs, when a rank container exits."""

    def healthy() -> int | None:
        for client, spec in zip(clients, specs, strict=True):
            state = inspect_rank(client, spec.name)
            if state is None or not state.running:
                pytest.fail(f"rank {spec.rank} exited:\n{rank_logs(client, spec.name)[-3000:]}")
        with contextlib.suppress(OSError):
            status, _ = http_get(port, "/health")
            if status == 200:
                return status
        return None

    def logs() -> str:
        return "\n".join(rank_logs(c, s.name, tail=5) for c, s in zip(clients, specs, strict=True))

    return wait_until(healthy, timeout, "/health 200", detail=logs)


def test_stop_signals_then_kills_after_the_grace_period(
    release_image: ReleaseImage, endpoints: list[DockerEndpoint]
) -> None:
    client = connect(endpoints[1])
    spec = RankContainer(
        cluster=CLUSTER,
        node=endpoints[1].node,
        rank=1,
        image=release_image.built.tag,
        name=f"sparkgate-{CLUSTER}-sleeper",
        # PID 1 ignores SIGTERM unless it handles it: stop must fall back to SIGKILL.
        argv=("python", "-c", "import time; print('up', flush=True); time.sleep(600)"),
    )
    assert run_rank(client, spec).running
    with pytest.raises(ClusterError, match="already running"):
        run_rank(client, spec)
    with pytest.raises(ClusterError, match="still runs after 1 s"):
        wait_rank(client, spec.name, timeout=1)
    stop_rank(client, spec.name, grace_s=1)
    state = inspect_rank(client, spec.name)
    assert state is not None
    assert (state.running, state.exit_code) == (False, 137)
    assert "up" in rank_logs(client, spec.name)
    document = inspect_document(client, spec.name)
    assert document is not None
    assert document["Config"]["Labels"]["io.sparkgate.cluster"] == CLUSTER
    assert document["HostConfig"]["NetworkMode"] == "host"
    assert remove_cluster(client, CLUSTER) == [spec.name]
    assert inspect_rank(client, spec.name) is None


def test_a_daemon_that_cannot_start_says_why(daemons: list[DockerDaemon]) -> None:
    name = f"t{os.getpid()}bad"
    try:
        with pytest.raises(ClusterError, match="exited with status") as caught:
            start_dockerd(name, STATE, netns="sparkgate-no-such-netns")
        assert "sparkgate-no-such-netns" in str(caught.value)
        assert not (daemon_root(name, STATE) / "x").exists()
    finally:
        shutil.rmtree(daemon_root(name, STATE), ignore_errors=True)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return True


def test_stopping_a_daemon_leaves_nothing_behind(
    release_image: ReleaseImage, daemons: list[DockerDaemon]
) -> None:
    """Runs last: it stops the third daemon (the fixture's teardown then finds it stopped)."""
    daemon = daemons[2]
    client = connect(DockerEndpoint(node=daemon.name, base_url=daemon.base_url))
    container = client.containers.run(
        release_image.built.tag,
        ["600"],
        entrypoint=["sleep"],
        detach=True,
        network_mode="host",
        stop_signal="SIGKILL",
    )
    container_pid = int(client.api.inspect_container(container.id)["State"]["Pid"])
    containerd_pid = int((daemon.exec_root / "containerd" / "containerd.pid").read_text())
    client.close()
    stop_dockerd(daemon)
    for pid in (daemon.pid, containerd_pid, container_pid):
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), pid
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(daemon.root) not in mounts
    assert not daemon.socket.exists()
    assert not daemon.exec_root.exists()
