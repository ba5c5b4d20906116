"""The operator runtime boots the recipe double's triangle with the launcher's own containers.

Issue 26 deliverable 4: `runtime.kind: operator` drives the operator's commands, so what is
qualified is what production runs. The example file `tp3-triangle-operator.yaml` plus the lab
overlay (addresses, users, paths only) boots r6x on the double with `sparkgate cluster start`:
the head runs the checkout's `bin/spark cluster start --apply --replace`, whose `docker run`s
(rendered from the checkout's config, `recipe_config`) are the rank containers. Each node's
`dsv41-karmic-kraken` is then the launcher's (no sparkgate label, the recipe's command with the
rank arguments last), a stopped container of that name that was there before (production's, on
the head) was replaced, the engine answers a chat request, the example's status command lists
every node's container, and `sparkgate cluster stop` stops them through `cluster stop --apply`,
leaving the stopped containers to the operator. Before the start, `sparkgate image build`
adopts the image the checkout's build made and loads it on every node, through the operator
runtime as a qualification's build and distribute stages do.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import docker
import pytest
import yaml
from docker.errors import NotFound

from flows.cli import main
from flows.cluster.lab.hosts import LabState
from flows.cluster.runtime.containers import LABEL
from flows.cluster.transport.factory import TransportPool
from flows.spec.cluster import Cluster, OperatorRuntime
from flows.spec.load import load_model
from flows.spec.release import Release
from tests.lab.recipe_double import double, recipe_config
from tests.lab.test_lab_docker_boot import DOCKER_CACHE, chat, cli_json
from tests.lab.test_recipe_double import LAB_DIR, R6X, SNAPSHOT, base_image, cluster, docker_lab
from tests.support.paths import ROOT

pytestmark = [pytest.mark.lab, pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1200)]
__all__ = ["base_image", "cluster", "docker_lab"]  # the module fixtures this test shares

EXAMPLE = ROOT / "examples" / "spark-ds41f"
OPERATOR = EXAMPLE / "clusters" / "tp3-triangle-operator.yaml"
RELEASE = EXAMPLE / "releases" / "r6x.yaml"
NAME = "dsv41-karmic-kraken"


def _clients(cluster: Cluster) -> dict[str, docker.DockerClient]:
    return {
        n.name: docker.DockerClient(base_url=str(n.overrides.docker_daemon)) for n in cluster.nodes
    }


def _lab_cluster(lab: LabState, root: Path, folder: Path) -> Cluster:
    """The operator example with the lab overlay; every node's checkout folder made anew."""
    assert lab.cluster_file is not None
    lab_document = yaml.safe_load(Path(lab.cluster_file).read_text())
    example = load_model(OPERATOR, Cluster)
    workdirs = {n.name: f"{root}/{n.name}{double.RECIPE_CHECKOUT}" for n in example.nodes}
    for workdir in workdirs.values():
        shutil.rmtree(workdir, ignore_errors=True)
    path = double.write_lab_cluster(OPERATOR, lab_document, root, workdirs, folder / "lab.yaml")
    return load_model(path, Cluster)


def test_the_operator_runtime_boots_the_triangle_with_the_launchers_containers(
    docker_lab: LabState, base_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    root = LAB_DIR / "spark"
    double.make_spark_files(root, SNAPSHOT)
    lab = _lab_cluster(docker_lab, root, tmp_path)
    assert isinstance(lab.runtime, OperatorRuntime)
    cluster_file = str(tmp_path / "lab.yaml")
    release = load_model(RELEASE, Release)
    checkout = Path(lab.head.workdir)
    launcher = recipe_config.launcher_files(lab, release, f"{root}{double.RECIPE_HOME}")
    double.make_checkout(
        checkout, base_image=base_image, tag=R6X, tests=["tests/test_x.py"], launcher=launcher
    )
    for node in lab.nodes:  # the recipe's `{home}/projects/spark-ds41f/cache`, git-ignored
        (Path(node.workdir) / "cache").mkdir(parents=True)
    state = tmp_path / "state"
    (state / "cache").mkdir(parents=True)
    (state / "cache" / "docker").symlink_to(DOCKER_CACHE)
    monkeypatch.setenv("SPARKGATE_STATE_DIR", str(state))
    clients = _clients(lab)
    head = clients[lab.head.name]
    try:
        with TransportPool(lab) as pool:  # the operator built r6x earlier, as the thread says
            ssh = pool.node(lab.head.name)
            built = ssh.run(
                ["sh", "-c", "bin/spark build prepare && bin/spark build image --apply"],
                cwd=str(checkout), timeout=900,
            )  # fmt: skip
            assert built.rc == 0, built.stdout + built.stderr[-3000:]
            # docs/docker-and-lab.md: `image build` adopts it on the head, loads it everywhere.
            made, said = cli_json(capsys, "image", "build", str(RELEASE), "-c", cluster_file)
            image = head.images.get(R6X).id
            assert (made["runtime"], made["origin"], made["verb"]) == (
                "operator",
                "image",
                "adopted",
            )
            assert [n["facts"]["image_id"] for n in made["nodes"]] == [image] * len(lab.nodes)
            assert "same image ID on 3 nodes" in made["summary"], said
            # Production's stopped container of that name, which `--replace` takes over.
            previous = head.containers.create(R6X, ["/models"], name=NAME).id

            session, _ = cli_json(capsys, "cluster", "start", str(RELEASE), "-c", cluster_file)
            assert session["runtime"] == "operator"
            assert {h["container"] for h in session["handles"]} == {NAME}
            for node in lab.nodes:
                container = clients[node.name].containers.get(NAME)
                assert container.status == "running", node.name
                assert LABEL not in container.labels  # the launcher's, not sparkgate's
                assert container.image.id == image
                command = container.attrs["Config"]["Cmd"]
                assert command[0] == "/models"
                assert command[-6 if node.head else -7 :][:2] == ["--node-rank", str(node.rank)]
                assert (command[-1] == "--headless") is not node.head
                assert container.attrs["Config"]["Entrypoint"] == ["vllm", "serve"]
            with pytest.raises(NotFound):
                head.containers.get(previous)  # replaced, and its backup removed
            assert [c.name for c in head.containers.list(all=True)] == [NAME]
            assert chat(f"http://{lab.head.address}:{lab.ports.api}")["choices"]

            status = ssh.run(lab.runtime.commands.status, cwd=str(checkout))
            assert status.rc == 0, status.stdout + status.stderr
            listed = [line.split("\t")[:2] for line in status.stdout.splitlines()]
            assert [(n, c.split("|")[:2]) for n, c in listed] == [
                (node.name, [NAME, R6X]) for node in lab.nodes
            ]

            assert main(["cluster", "stop", "-c", cluster_file]) == 0
            for node in lab.nodes:
                stopped = clients[node.name].containers.get(NAME)  # left to the operator
                assert stopped.status == "exited", node.name
            assert ssh.run(lab.runtime.commands.status, cwd=str(checkout)).rc == 1
    finally:
        main(["cluster", "stop", "-c", cluster_file])
        for client in clients.values():
            client.close()
