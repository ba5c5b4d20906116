"""The recipe double behaves like the recipe where sparkgate touches it.

Three namespace hosts with their own dockerd (tests/lab/recipe_double): over SSH on the head, the
double's checkout runs `bin/spark build image --apply` as the recipe's does: it refuses an
unprepared build directory and an untracked file, prints the recipe's `built TAG sha256:...`
line (which r6y's `image_line` reads), and refuses a tag that exists. The image runs as root;
a rank with the display carve-out on and no display device refuses to start with vLLM patch
0021's error; with the device, a one-rank boot of the image serves the model bind-mounted from an
HF-cache snapshot path, logs lines the vllm-recipe profile reads as its phases, and leaves its
caches owned by root. A container with the recipe's `--ulimit=memlock=-1:-1` starts on the lab's
daemons, whose `runc` (the double's) lowers the ask to this machine's limit and logs it. With the
recipe's own SSH user, `swank` and not root, a cold boot's cache emptying removes the caches that
the image's root user wrote, which that user's `rm -rf` cannot (issue 26 item 5).
"""

from __future__ import annotations

import ipaddress
import json
import os
import pwd
import re
import resource
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from flows.cluster.boot.caches import CacheTarget
from flows.cluster.boot.timeline import LogReader
from flows.cluster.build.release_image import build_for
from flows.cluster.lab.hosts import LabPlan, LabState
from flows.cluster.runtime.factory import runtime_for
from flows.cluster.runtime.run_args import run_arg_options
from flows.cluster.transport.factory import TransportPool
from flows.spec.cluster import Cluster, DockerRuntime
from flows.spec.engine import EngineProfile
from flows.spec.load import load_model
from flows.spec.release import Release
from tests.lab.recipe_double import double, runc_memlock, spark_host
from tests.support.lab import docker_lab as docker_lab_up
from tests.support.paths import ROOT

from .test_lab_docker_boot import DOCKER_CACHE

pytestmark = [pytest.mark.lab, pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

SHIMS = ROOT / ".sparkgate" / "recipe-double" / "bin"
RUNC = SHIMS.parent / "runc"
# The Sparks' nvidia-smi, cat and grep (spark_host) that the example clusters' probes read.
PROBES = SHIMS.parent / "probes"
# Its names, subnet and folder; a second run (another checkout's, or this one's) has its own
# beside this one with SPARKGATE_RECIPE_LAB=PREFIX,SUBNET (e.g. "sg-q,198.18.14.0/24").
_LAB = os.environ.get("SPARKGATE_RECIPE_LAB", "sg-r,198.18.13.0/24")
_LAB_NAME, _, _LAB_SUBNET = _LAB.partition(",")
PLAN = LabPlan(
    prefix=_LAB_NAME, nodes=3, subnet=ipaddress.IPv4Network(_LAB_SUBNET), docker=True,
    session_path=(str(PROBES / "bin"), str(SHIMS)),
)  # fmt: skip
# short: unix socket paths are limited
LAB_DIR = ROOT / ".sparkgate" / ("test-lab-rd" if _LAB_NAME == "sg-r" else f"test-lab-{_LAB_NAME}")
R6X = "vllm-ds41f-kkref:19f2c20ed4d6-r6x"
R6Y = "vllm-ds41f-kkref:19f2c20ed4d6-r6y"
SNAPSHOT = (
    "/home/swank/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4.1-Flash-1017/snapshots/"
    "1bae0e1088993b9b82de08f59de5be5a34e42170"
)
# r6y's image_line (examples/spark-ds41f/releases/r6y.yaml).
IMAGE_LINE = re.compile(r"^built (\S+) sha256:[0-9a-f]+ in ", re.MULTILINE)
PROFILE = ROOT / "config" / "engines" / "vllm-recipe.yaml"
TRIANGLE = ROOT / "examples" / "spark-ds41f" / "clusters" / "tp3-triangle.yaml"
UNLIMITED = 2**64 - 1  # -1 as docker writes it in the bundle (uint64)
OPERATOR_USER = "swank"  # the recipe's SSH user (its paths are under /home/swank)


@pytest.fixture(scope="module")
def docker_lab() -> Iterator[LabState]:
    """The docker lab, its dockerds able to start `--gpus=all` containers (the double's hook) and
    the recipe's unlimited memlock (the double's runc, first on their PATH); its sessions answer
    the example clusters' probes (driver, APST, GPU clocks, RDMA counters) as the recipe expects."""
    double.write_shims(SHIMS)
    spark_host.install(PROBES)
    hook = double.write_gpu_hook(SHIMS.parent / "gpu")
    runc = double.write_runc_wrapper(RUNC)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{runc}:{hook}:{os.environ['PATH']}")
        with docker_lab_up(PLAN, LAB_DIR) as state:
            for host in state.hosts:
                spark_host.SparkHost(PROBES, host.address).as_expected()
            yield state


@pytest.fixture(scope="module")
def cluster(docker_lab: LabState) -> Cluster:
    assert docker_lab.cluster_file is not None
    return load_model(docker_lab.cluster_file, Cluster)


@pytest.fixture(scope="module")
def base_image(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The bundled engine's image on the head (the double's base), from the cached docker inputs."""
    state = tmp_path_factory.mktemp("state")
    (state / "cache").mkdir()
    DOCKER_CACHE.mkdir(parents=True, exist_ok=True)
    (state / "cache" / "docker").symlink_to(DOCKER_CACHE)
    release = load_model(ROOT / "releases" / "r1.yaml", Release)
    return build_for(cluster, release, state).built.tag


def _daemon(cluster: Cluster, index: int) -> docker.DockerClient:
    url = cluster.nodes[index].overrides.docker_daemon
    assert url is not None
    return docker.DockerClient(base_url=url)


def test_the_build_refuses_what_the_recipe_refuses_and_prints_the_built_line(
    cluster: Cluster, base_image: str, tmp_path: Path
) -> None:
    checkout = tmp_path / "spark-ds41f"
    double.make_checkout(checkout, base_image=base_image, tag=R6X, tests=["tests/test_x.py"])
    build = ["bin/spark", "--cluster-config", "config/cluster.json", "build", "image", "--apply"]
    head = _daemon(cluster, 0)
    try:
        with TransportPool(cluster) as pool:
            ssh = pool.node(cluster.head.name)
            assert ssh.run(["docker", "info", "--format", "{{.Name}}"]).ok  # the head's dockerd

            unprepared = ssh.run(build, cwd=str(checkout))
            assert unprepared.rc == 1
            assert "is not prepared; run bin/spark build prepare" in unprepared.stdout

            assert ssh.run(["bin/spark", "build", "prepare"], cwd=str(checkout)).ok
            (checkout / "sparkgate.lock").write_text("{}\n")  # what issue 26 item 3 is about
            dirty = ssh.run(build, cwd=str(checkout))
            assert dirty.rc == 1
            assert "the image records the deployment commit; commit changes first" in dirty.stdout
            (checkout / "sparkgate.lock").unlink()

            built = ssh.run(build, cwd=str(checkout), timeout=900)
            assert built.rc == 0, built.stdout + built.stderr[-3000:]
            line = IMAGE_LINE.search(built.stdout)
            assert line is not None, built.stdout
            assert line.group(1) == R6X
            image = head.images.get(R6X)
            assert f"built {R6X} {image.id} in " in built.stdout
            assert image.attrs["Config"]["User"] in ("", "root", "0")
            assert image.attrs["Config"]["Entrypoint"] == ["vllm", "serve"]
            assert image.labels["local.spark3.vllm.tree"] == "double-r6x"
            receipts = list(checkout.glob(".work/build/*/images/*.json"))
            assert [r.name for r in receipts] == [f"{image.id.removeprefix('sha256:')[:16]}.json"]

            again = ssh.run(build, cwd=str(checkout))
            assert again.rc == 1
            assert (
                f"{R6X} already exists here; pass --tag with a new tag rather than overwrite it"
                in again.stderr
            )
            listed = ssh.run(["docker", "run", "--rm", "--entrypoint", "ls", R6X,
                              "/opt/spark3/candidate/vllm/tests"])  # fmt: skip
            assert listed.stdout.split() == ["test_x.py"]
    finally:
        head.close()


def test_a_rank_refuses_without_the_display_device_and_serves_with_it_as_root(
    cluster: Cluster, base_image: str, tmp_path: Path
) -> None:
    root = LAB_DIR / "spark"
    double.make_spark_files(root, SNAPSHOT)
    checkout = tmp_path / "spark-ds41f"
    double.make_checkout(checkout, base_image=base_image, tag=R6Y, tests=["tests/test_x.py"])
    head = _daemon(cluster, 0)
    address = cluster.head.address
    cache = tmp_path / "cache"
    cache.mkdir()
    profile = load_model(PROFILE, EngineProfile)
    env = {key: value for key, value in profile.launch.env.items() if "{" not in value}
    argv = ["/models", "--served-model-name", "deepseek-v4.1-flash", "--host", "0.0.0.0",
            "--port", "8000", "--tensor-parallel-size", "1", "--nnodes", "1", "--node-rank", "0",
            "--master-addr", address, "--master-port", "9999", "--max-num-seqs", "8"]  # fmt: skip
    snapshot = root / SNAPSHOT.lstrip("/")
    mounts = [  # the snapshot's entries link to ../../blobs, as in the HF hub cache
        docker.types.Mount("/models", str(snapshot), type="bind", read_only=True),
        docker.types.Mount(
            "/blobs", str(snapshot.parents[1] / "blobs"), type="bind", read_only=True
        ),
        docker.types.Mount("/cache", str(cache), type="bind"),
    ]
    try:
        with TransportPool(cluster) as pool:
            ssh = pool.node(cluster.head.name)
            assert ssh.run(["bin/spark", "build", "prepare"], cwd=str(checkout)).ok
            built = ssh.run(
                ["bin/spark", "build", "image", "--apply"], cwd=str(checkout), timeout=900
            )
            assert built.rc == 0 or "already exists here" in built.stderr, built.stderr[-2000:]

        refused = head.containers.run(
            R6Y, argv, environment=env, mounts=mounts, network_mode="host", detach=True
        )
        assert refused.wait(timeout=120)["StatusCode"] == 1
        said = refused.logs().decode()
        refused.remove()
        assert (
            "SPARK3_DISPLAY_CARVEOUT_WEIGHTS=1 but the display carve-out cannot hold 848 MiB of "
            "weights (/dev/dri/card0:" in said
        )
        assert "EngineCore failed to start." in said
        assert not any(cache.rglob("*"))  # refused before any cache write

        display = str(root / double.DISPLAY_NODE.lstrip("/"))
        serving = head.containers.run(
            R6Y, argv, environment=env, network_mode="host", detach=True,
            mounts=[*mounts, docker.types.Mount("/dev/dri/card0", display, type="bind")],
            device_requests=[docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])],
        )  # fmt: skip
        try:
            models = _wait_for_models(f"http://{address}:8000/v1/models", serving)
            assert [m["id"] for m in models["data"]] == ["deepseek-v4.1-flash"]
            logs = serving.logs(timestamps=True).decode()
        finally:
            serving.stop(timeout=10)
            serving.remove()
        events = LogReader(profile.logs, node=cluster.head.name, rank=0).read(logs.splitlines())
        names = [event.name for event in events]
        for phase in ("weights_loaded", "rendezvous", "ready"):
            assert phase in names, logs[-3000:]
        written = [p for p in cache.rglob("*") if p.is_file()]
        assert written, "the rank wrote no cache"
        assert {p.stat().st_uid for p in written} == {0}
        assert (cache / "kkref" / "jit" / "tilelang").is_dir()  # the profile's kernel cache
    finally:
        head.close()
        shutil.rmtree(cache, ignore_errors=True)


def test_a_container_with_the_recipes_unlimited_memlock_runs_and_the_lowering_is_logged(
    cluster: Cluster, base_image: str
) -> None:
    runtime = load_model(TRIANGLE, Cluster).runtime
    assert isinstance(runtime, DockerRuntime)
    ulimits = [arg for arg in runtime.run_args if arg.startswith("--ulimit=")]
    assert "--ulimit=memlock=-1:-1" in ulimits  # the recipe's, as the example cluster has it
    head = _daemon(cluster, 0)
    try:
        # dockerd names its runtime by name, so containerd's shim finds the double's on its PATH.
        assert head.info()["Runtimes"]["runc"]["path"] == "runc"
        show = "import resource; print(*resource.getrlimit(resource.RLIMIT_MEMLOCK))"
        container = head.containers.create(
            base_image, ["-c", show], entrypoint=["python"], network_mode="host",
            **run_arg_options(ulimits),
        )  # fmt: skip
        try:
            container.start()  # without the double's runc: "error setting rlimit type 8"
            status = container.wait(timeout=120)["StatusCode"]
            said = container.logs().decode()
            container.reload()
            options = container.attrs["HostConfig"]["Ulimits"]
        finally:
            container.remove(force=True)
    finally:
        head.close()
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    assert status == 0, said
    assert said.split() == [str(hard), str(hard)]  # what this machine allows
    assert {"Name": "memlock", "Soft": -1, "Hard": -1} in options  # the recipe's, unchanged
    records = [json.loads(line) for line in (RUNC / runc_memlock.LOG_NAME).read_text().splitlines()]
    assert [r for r in records if r["container"] == container.id] == [
        {
            "container": container.id,
            "asked": {"soft": UNLIMITED, "hard": UNLIMITED},  # the recipe asked for no limit
            "given": {"soft": hard, "hard": hard},
        }
    ]


@pytest.fixture
def operator_user(docker_lab: LabState) -> Iterator[Path]:
    """The recipe's SSH user on the lab's hosts: `swank`, not root, logging in with the lab's key.

    The hosts share this machine's users, so `swank` is made here when missing (and removed
    after). sshd reads the lab's authorized_keys as the user who logs in, so the lab folder is
    traversable for the test's length. Yields a folder the user owns, as its home on a Spark.
    """
    made = subprocess.run(["id", OPERATOR_USER], capture_output=True, check=False).returncode != 0
    lab_dir = Path(docker_lab.lab_dir)
    home = lab_dir / OPERATOR_USER
    if made:  # a password of "*", not "!": sshd without PAM refuses a locked account
        subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--shell",
                        "/bin/sh", "--password", "*", OPERATOR_USER], check=True)  # fmt: skip
    user = pwd.getpwnam(OPERATOR_USER)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir()
    os.chown(home, user.pw_uid, user.pw_gid)
    lab_dir.chmod(0o711)
    try:
        yield home
    finally:
        lab_dir.chmod(0o700)
        shutil.rmtree(home, ignore_errors=True)
        if made:
            _remove_user(OPERATOR_USER)


def _remove_user(name: str, timeout: float = 30) -> None:
    """userdel refuses a user with a live process: sshd's session processes end only just
    after the client has closed the connection, so wait for them first."""
    deadline = time.monotonic() + timeout
    while subprocess.run(["pgrep", "-u", name], capture_output=True, check=False).returncode == 0:
        if time.monotonic() > deadline:
            raise AssertionError(f"processes of {name} still run after {timeout:g} s")
        time.sleep(0.2)
    subprocess.run(["userdel", name], check=True)


def test_cold_boots_empty_the_caches_root_wrote_when_the_ssh_user_is_not_root(
    cluster: Cluster, base_image: str, operator_user: Path
) -> None:
    """Issue 26 item 5: the image's root user writes the caches under the SSH user's folder; the
    SSH user cannot remove them, and the docker runtime empties them as root in the image."""
    as_operator = cluster.model_copy(
        update={"transport": cluster.transport.model_copy(update={"user": OPERATOR_USER})}
    )
    caches = operator_user / "cache"
    caches.mkdir()
    os.chown(caches, operator_user.stat().st_uid, operator_user.stat().st_gid)
    kinds = ("vllm", "triton")
    write = " && ".join(f"mkdir -p /c/{k}/k && echo jit > /c/{k}/k/{k}.so" for k in kinds)
    head = _daemon(cluster, 0)
    try:
        head.containers.run(
            base_image, ["-c", write], entrypoint=["sh"], user="0", remove=True,
            mounts=[docker.types.Mount("/c", str(caches), type="bind")],
        )  # fmt: skip
    finally:
        head.close()
    written = [p for p in caches.rglob("*") if p.is_file()]
    assert len(written) == len(kinds)
    assert {p.stat().st_uid for p in written} == {0}
    node = cluster.head.name
    targets = [CacheTarget(node=node, rank=0, kind=k, path=str(caches / k)) for k in kinds]
    with TransportPool(as_operator) as pool:
        ssh = pool.node(node)
        assert ssh.run(["id", "-un"], check=True).stdout.split() == [OPERATOR_USER]
        own = ssh.run(["rm", "-rf", "--", targets[0].path])
        assert own.rc != 0
        assert "Permission denied" in own.stderr  # why the runtime does not empty them as swank
        runtime = runtime_for(as_operator, {node: ssh}, image=base_image)
        runtime.empty_caches(targets)
    for target in targets:
        assert Path(target.path).is_dir()
        assert not any(Path(target.path).iterdir()), target.path


def _wait_for_models(
    url: str, container: object, timeout: float = 300
) -> dict[str, list[dict[str, str]]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                document = json.loads(answer.read())
                assert isinstance(document, dict)
                return document
        except OSError:
            time.sleep(1)
    logs = container.logs().decode()[-3000:]  # type: ignore[attr-defined]
    raise AssertionError(f"{url} never answered: {logs}")
