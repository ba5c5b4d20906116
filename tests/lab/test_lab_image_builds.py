"""The operator's image: a prebuilt tag adopted, made by their own command, or a Dockerfile.

Three namespace hosts, each with its own dockerd; the cluster is the first two, and the third
host's dockerd stands in for the controller's daemon (a daemon that is no node). The bundled
engine's image is built once on the head and tagged as if the operator had built it
(`prebuilt/sparkengine:r6x`). r6x adopts that tag; r6y names a build command (a script that runs
`docker build` against the head's daemon and prints the tag) and compares its outputs with r6x's
record on the same shape. Both qualify with the real CLI; each record keeps the image ID every
node verified. Then the build script is removed and `promote --deploy` starts r6y: it runs the
recorded image ID and never builds.

The dockerfile kind: r6d builds a Dockerfile (FROM the prebuilt tag, a build arg) on the head's
daemon, offline; r6c builds it on the controller's daemon and ships it to both nodes, which must
then hold the image ID the controller built; its deploy runs that ID with the Dockerfile gone. A
base the build daemon lacks is refused (pulls not allowed), and named contexts are built where
this machine has buildx and refused before anything starts where it has not.
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import yaml

from flows.cluster.build.dockerfile import probe_builder
from flows.cluster.build.release_image import build_for
from flows.cluster.lab.hosts import LabPlan, LabState
from flows.record import read_record, verify
from flows.record.reader import latest_record
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release
from tests.support.lab import docker_lab as docker_lab_up
from tests.support.paths import ROOT
from tests.support.prefect_server import Server

from .test_lab_docker_boot import DOCKER_CACHE

pytestmark = [
    pytest.mark.lab, pytest.mark.docker, pytest.mark.slow, pytest.mark.prefect_server,
    pytest.mark.timeout(1800),
]  # fmt: skip

PLAN = LabPlan(prefix="sg-i", nodes=3, subnet=ipaddress.IPv4Network("198.18.11.0/24"), docker=True)
LAB_DIR = ROOT / ".sparkgate" / "test-lab-img"  # short: unix socket paths are limited
PREBUILT = "prebuilt/sparkengine:r6x"
MADE = "cmd/sparkengine:r6y"
GATES = {
    "release_tests": {"enabled": False,
                      "classification": str(ROOT / "config" / "release-tests.yaml")},
    "determinism": {"prompts": ["The quick brown fox", "Once upon a time"], "max_tokens": 8,
                    "long_prompt_tokens": 200, "sampled_streams": 1, "stagger_ms": 20},
    "cold_boots": {"enabled": False},
    "benchmark": {"enabled": False},
}  # fmt: skip
# The operator's build: a real `docker build` on the head's daemon, the tag printed at the end.
BUILD_SCRIPT = """\
#!/bin/sh
set -eu
export DOCKER_HOST="$1" DOCKER_BUILDKIT=0
printf 'FROM {base}\\nLABEL org.sparkgate.test=made-by-command\\n' | docker build -q -t {tag} -
echo "built {tag}"
"""


# A Dockerfile on the prebuilt engine image; NOTE makes each release's image its own.
DOCKERFILE = """\
FROM {base}
ARG NOTE=unset
LABEL org.sparkgate.test.note=$NOTE
"""


@pytest.fixture(scope="module")
def docker_lab() -> Iterator[LabState]:
    with docker_lab_up(PLAN, LAB_DIR) as state:
        yield state


def _two_nodes(lab: LabState, folder: Path) -> Path:
    """The lab's first two hosts as the cluster; the third host's dockerd is the controller's."""
    assert lab.cluster_file is not None
    document = yaml.safe_load(Path(lab.cluster_file).read_text())
    controller = document["nodes"][2]["overrides"]["docker_daemon"]
    document["nodes"] = document["nodes"][:2]
    document["shape"] = "tp2-lab"
    document["runtime"]["builds"] = {"controller_daemon": controller}
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / "lab-two.yaml"
    file.write_text(yaml.safe_dump(document, sort_keys=False))
    return file


def _environment(tmp_path: Path, server: Server) -> dict[str, str]:
    """sparkgate in a private project whose runs go to the session's Prefect server."""
    state = tmp_path / "state"
    (state / "cache").mkdir(parents=True)
    DOCKER_CACHE.mkdir(parents=True, exist_ok=True)
    (state / "cache" / "docker").symlink_to(DOCKER_CACHE)
    return {**server.env, "SPARKGATE_ROOT": str(tmp_path), "SPARKGATE_STATE_DIR": str(state)}


def _prebuilt(cluster: Cluster, state: Path) -> str:
    """The bundled engine's image, tagged PREBUILT on the head (built once, reused after)."""
    head = _daemon(cluster, 0)
    try:
        try:
            return str(head.images.get(PREBUILT).id)
        except docker.errors.ImageNotFound:
            shipped = load_model(ROOT / "releases" / "r1.yaml", Release)
            built = build_for(cluster, shipped, state)
            head.images.get(built.built.tag).tag(PREBUILT)
            return str(head.images.get(PREBUILT).id)
    finally:
        head.close()


def _daemon(cluster: Cluster, index: int) -> docker.DockerClient:
    url = cluster.nodes[index].overrides.docker_daemon
    assert url is not None
    return docker.DockerClient(base_url=url)


def _release(root: Path, name: str, previous: str | None, build: dict[str, object]) -> Path:
    document = {
        "kind": "release", "name": name, "previous": previous, "build": build,
        "engine": {"options": {"mlp_kernel": "reference"}}, "model": {"seed": 0, "size": "tiny"},
        "outputs": {"change": "unchanged"} if previous else
                   {"change": "changed", "reason": "first release on this cluster"},
        "gates": {**GATES, "determinism": {**GATES["determinism"],
                                           "against_previous": previous is not None}},
    }  # fmt: skip
    file = root / "releases" / f"{name}.yaml"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(yaml.safe_dump(document, sort_keys=False))
    return file


def _sparkgate(env: dict[str, str], root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flows", *argv], env=env, cwd=root, text=True,
        capture_output=True, timeout=900, check=False,
    )  # fmt: skip


def test_an_adopted_tag_and_a_command_build_qualify_and_promote_runs_the_recorded_image(
    docker_lab: LabState, tmp_path: Path, prefect_api: Server
) -> None:
    cluster_file = str(_two_nodes(docker_lab, tmp_path / "config"))
    cluster = load_model(cluster_file, Cluster)
    env = _environment(tmp_path, prefect_api)

    # what the operator built earlier: the bundled engine's image, tagged on the head only
    prebuilt_id = _prebuilt(cluster, tmp_path / "state")
    head, worker = _daemon(cluster, 0), _daemon(cluster, 1)
    try:
        r6x = _release(tmp_path, "r6x", None, {"kind": "image", "image": PREBUILT})
        done = _sparkgate(env, tmp_path, "qualify", str(r6x), "-c", cluster_file, "--no-wait")
        assert done.returncode == 0, done.stdout + done.stderr[-4000:]
        adopted = latest_record(tmp_path / "experiments", "r6x")
        assert adopted is not None
        assert adopted.build_digest == prebuilt_id
        assert adopted.documents["build.json"]["origin"] == "image"
        assert worker.images.get(PREBUILT).id == prebuilt_id  # distributed, one image ID
        said = (done.stdout + done.stderr).replace("\n", " ")
        assert f"image {PREBUILT} adopted, same ID on 2 nodes" in said

        script = tmp_path / "build.sh"
        script.write_text(BUILD_SCRIPT.format(base=PREBUILT, tag=MADE))
        daemon = str(cluster.nodes[0].overrides.docker_daemon)
        r6y = _release(tmp_path, "r6y", "r6x", {
            "kind": "command", "command": ["sh", str(script), daemon], "cwd": str(tmp_path),
            "image_line": r"^built (\S+)$",
        })  # fmt: skip
        done = _sparkgate(env, tmp_path, "qualify", str(r6y), "-c", cluster_file, "--no-wait")
        assert done.returncode == 0, done.stdout + done.stderr[-4000:]
        made_id = head.images.get(MADE).id
        assert made_id != prebuilt_id  # the command really built a new image
        made = latest_record(tmp_path / "experiments", "r6y")
        assert made is not None
        assert made.build_digest == made_id
        assert made.documents["build.json"]["origin"] == "command"
        assert worker.images.get(MADE).id == made_id
        record = read_record(tmp_path / "experiments" / made.name)
        determinism = record.stages["determinism"]
        assert "r6x" in determinism.reason, determinism.reason  # compared within tp2-lab
        assert verify(tmp_path / "experiments" / made.name) == []

        # promotion never builds: without the build script, the deploy runs the recorded ID
        script.unlink()
        done = _sparkgate(env, tmp_path, "promote", str(r6y), "--by", "lab", "--deploy",
                          "-c", cluster_file)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr[-4000:]
        assert "running the release's build command" not in done.stderr
        pointer = yaml.safe_load((tmp_path / f"config/promoted/{cluster.name}.yaml").read_text())
        assert pointer["current"]["build_digest"] == made_id
        running = [c for c in head.containers.list() if c.name.startswith("sparkgate-")]
        assert [c.image.id for c in running] == [made_id]
    finally:
        _sparkgate(env, tmp_path, "cluster", "stop", "-c", cluster_file)
        head.close()
        worker.close()


def test_a_dockerfile_built_on_the_head_or_on_the_controller_qualifies_on_one_image_id(
    docker_lab: LabState, tmp_path: Path, prefect_api: Server
) -> None:
    cluster_file = str(_two_nodes(docker_lab, tmp_path / "config"))
    cluster = load_model(cluster_file, Cluster)
    env = _environment(tmp_path, prefect_api)
    prebuilt_id = _prebuilt(cluster, tmp_path / "state")
    head, worker = _daemon(cluster, 0), _daemon(cluster, 1)
    controller_url = str(yaml.safe_load(Path(cluster_file).read_text())["runtime"]["builds"][
        "controller_daemon"])  # fmt: skip
    controller = docker.DockerClient(base_url=controller_url)
    context = tmp_path / "image"
    context.mkdir()
    (context / "Dockerfile").write_text(DOCKERFILE.format(base=PREBUILT))
    try:
        # offline: a base the build daemon lacks is refused, nothing is pulled or built
        (context / "Absent.dockerfile").write_text("FROM sparkgate-absent/base:1\n")
        absent = _release(tmp_path, "r6a", None, {
            "kind": "dockerfile", "context": str(context), "dockerfile": "Absent.dockerfile",
        })  # fmt: skip
        done = _sparkgate(env, tmp_path, "qualify", str(absent), "-c", cluster_file, "--no-wait")
        said = " ".join((done.stdout + done.stderr).split())
        assert done.returncode != 0, said[-3000:]
        assert "lacks sparkgate-absent/base:1" in said, said[-3000:]
        assert "does not allow pulls" in said

        # built on the head's daemon, offline, with a build arg; distributed to the worker
        r6d = _release(tmp_path, "r6d", None, {
            "kind": "dockerfile", "context": str(context), "args": {"NOTE": "head"},
        })  # fmt: skip
        done = _sparkgate(env, tmp_path, "qualify", str(r6d), "-c", cluster_file, "--no-wait")
        assert done.returncode == 0, done.stdout + done.stderr[-4000:]
        record = latest_record(tmp_path / "experiments", "r6d")
        assert record is not None
        built = record.documents["build.json"]
        assert (built["origin"], built["built_on"]) == ("dockerfile", cluster.nodes[0].name)
        tag, image_id = built["built"]["tag"], built["built"]["image_id"]
        assert tag.startswith("sparkgate/r6d:")
        assert record.build_digest == image_id != prebuilt_id
        assert head.images.get(tag).id == worker.images.get(tag).id == image_id
        assert head.images.get(tag).labels["org.sparkgate.test.note"] == "head"

        # built on the controller's daemon (no node), shipped to both nodes, one image ID
        loaded = controller.images.load(head.images.get(PREBUILT).save(named=PREBUILT))
        assert [image.id for image in loaded] == [prebuilt_id]
        r6c = _release(tmp_path, "r6c", None, {
            "kind": "dockerfile", "context": str(context), "args": {"NOTE": "controller"},
            "on": "controller",
        })  # fmt: skip
        done = _sparkgate(env, tmp_path, "qualify", str(r6c), "-c", cluster_file, "--no-wait")
        assert done.returncode == 0, done.stdout + done.stderr[-4000:]
        record = latest_record(tmp_path / "experiments", "r6c")
        assert record is not None
        built = record.documents["build.json"]
        assert (built["origin"], built["built_on"]) == ("dockerfile", "controller")
        tag, image_id = built["built"]["tag"], built["built"]["image_id"]
        assert controller.images.get(tag).id == image_id
        assert head.images.get(tag).id == worker.images.get(tag).id == image_id
        assert record.build_digest == image_id
        said = " ".join((done.stdout + done.stderr).split())
        assert f"controller: built {tag}" in said
        for node in cluster.nodes:  # shipped from the controller to the head and the worker
            assert f"{node.name}: image loaded" in said
        assert f"image {tag} adopted, same ID on 2 nodes" in said
        assert verify(tmp_path / "experiments" / record.name) == []

        # the deploy runs the recorded image ID and never builds: the Dockerfile is gone
        (context / "Dockerfile").unlink()
        done = _sparkgate(env, tmp_path, "promote", str(r6c), "--by", "lab", "--deploy",
                          "-c", cluster_file)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr[-4000:]
        assert "building" not in done.stderr
        running = [c for c in head.containers.list() if c.name.startswith("sparkgate-")]
        assert [c.image.id for c in running] == [image_id]
        _sparkgate(env, tmp_path, "cluster", "stop", "-c", cluster_file)

        # named contexts: built where buildx answers, refused before anything starts elsewhere
        (context / "Dockerfile").write_text(
            f"FROM {PREBUILT}\nCOPY --from=extra note.txt /note.txt\n"
        )
        (tmp_path / "extra").mkdir()
        (tmp_path / "extra" / "note.txt").write_text("from a named context\n")
        r6n = _release(tmp_path, "r6n", None, {
            "kind": "dockerfile", "context": str(context), "contexts": {"extra": "../extra"},
        })  # fmt: skip
        done = _sparkgate(env, tmp_path, "qualify", str(r6n), "-c", cluster_file, "--no-wait")
        if probe_builder() == "buildx":
            assert done.returncode == 0, done.stdout + done.stderr[-4000:]
        else:
            assert done.returncode == 2, done.stdout + done.stderr[-4000:]
            assert "only BuildKit through docker buildx" in " ".join(done.stderr.split())
            assert latest_record(tmp_path / "experiments", "r6n") is None
    finally:
        _sparkgate(env, tmp_path, "cluster", "stop", "-c", cluster_file)
        head.close()
        worker.close()
        controller.close()
