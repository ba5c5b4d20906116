"""TP3 in containers from the CLI: `cluster start` on a `lab up --docker` cluster, then stop.

Three namespace hosts, each with its own dockerd; `sparkgate cluster start` builds the release
image once (the debootstrap base and wheelhouse come from .sparkgate/cache/docker), loads it on
the other two daemons, prepares the model in a one-shot container and boots one rank container
per host. The engine must answer a chat completion on the head's lab address, `cluster status`
must name the containers, `cluster stop` must leave none, and a second start must reuse the image.
The release-tests gate then runs the failing-test release's tests inside its image on the head.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from flows.cli import main
from flows.cluster.lab.hosts import LabPlan, LabState
from flows.cluster.runtime.containers import cluster_containers
from flows.cluster.runtime.factory import runtime_for
from flows.cluster.transport.factory import TransportPool
from flows.gates.base import GateContext, GateResult, Outcome
from flows.gates.release_tests.runner import run_release_tests
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release, ReleaseTestsGate
from tests.support.lab import docker_lab as docker_lab_up
from tests.support.overlays import release_overlay
from tests.support.paths import ROOT

pytestmark = [pytest.mark.lab, pytest.mark.docker, pytest.mark.slow]

PLAN = LabPlan(prefix="sg-k", nodes=3, subnet=ipaddress.IPv4Network("198.18.7.0/24"), docker=True)
LAB_DIR = ROOT / ".sparkgate" / "test-lab-dkb"  # short: unix socket paths are limited
DOCKER_CACHE = ROOT / ".sparkgate" / "cache" / "docker"


def _summary(result: GateResult) -> dict[str, Any]:
    """The gate's typed summary, as the JSON the record keeps."""
    assert result.summary is not None, result.reason
    return result.summary.model_dump(mode="json")


@pytest.fixture(scope="module")
def docker_lab() -> Iterator[LabState]:
    with docker_lab_up(PLAN, LAB_DIR) as state:
        yield state


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private state folder that shares the cached base rootfs and wheelhouse."""
    folder = tmp_path / "state"
    (folder / "cache").mkdir(parents=True)
    DOCKER_CACHE.mkdir(parents=True, exist_ok=True)
    (folder / "cache" / "docker").symlink_to(DOCKER_CACHE)
    monkeypatch.setenv("SPARKGATE_STATE_DIR", str(folder))
    return folder


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """r1 built from a snapshot of engine/ (the checkout may change while the test runs)."""
    source = tmp_path / "engine"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    shutil.copytree(ROOT / "engine", source, ignore=ignore)
    return release_overlay(tmp_path / "r1.yaml", build={"source": str(source)})


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict[str, Any], str]:
    """Run the CLI with --json: the document on stdout and what it said on stderr."""
    capsys.readouterr()
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    result = json.loads(captured.out)
    assert isinstance(result, dict)
    return result, captured.err


def chat(base: str) -> dict[str, object]:
    models = json.loads(urllib.request.urlopen(base + "/v1/models", timeout=10).read())
    body = {
        "model": models["data"][0]["id"],
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 4,
    }
    request = urllib.request.Request(
        base + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        document = json.loads(answer.read())
    assert isinstance(document, dict)
    return document


def containers(cluster: Cluster) -> list[list[str]]:
    """Names of the cluster's rank containers on each node's daemon (running or not)."""
    names = []
    for node in cluster.nodes:
        assert node.overrides.docker_daemon is not None
        client = docker.DockerClient(base_url=node.overrides.docker_daemon)
        try:
            names.append([state.name for state in cluster_containers(client, cluster.name)])
        finally:
            client.close()
    return names


def test_tp3_boots_in_containers_from_the_cli_and_reuses_the_image(
    docker_lab: LabState, state: Path, release: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert docker_lab.cluster_file is not None
    cluster_file = docker_lab.cluster_file
    cluster = load_model(cluster_file, Cluster)
    assert cluster.runtime.kind == "docker"
    try:
        session, _ = cli_json(capsys, "cluster", "start", str(release), "-c", cluster_file)
        assert session["runtime"] == "docker"
        image = session["image"]
        assert str(image).startswith("sparkengine:")
        handles = session["handles"]
        assert isinstance(handles, list)
        assert sorted(h["container"] for h in handles) == sorted(
            f"sparkgate-{node.name}" for node in cluster.nodes
        )
        head = next(h for h in handles if h["head"])
        answer = chat(head["plan"]["ready_url"].removesuffix("/health"))
        assert answer["choices"]

        status, _ = cli_json(capsys, "cluster", "status", "-c", cluster_file)
        ranks = status["ranks"]
        assert isinstance(ranks, list)
        assert [r["state"] for r in ranks] == ["running"] * 3
        assert {r["id"] for r in ranks} == {h["container"] for h in handles}
        assert containers(cluster) == [[f"sparkgate-{node.name}"] for node in cluster.nodes]

        capsys.readouterr()
        assert main(["cluster", "logs", "-c", cluster_file, "--tail", "50"]) == 0
        assert '"event":"ready"' in capsys.readouterr().out

        assert main(["cluster", "stop", "-c", cluster_file]) == 0
        assert containers(cluster) == [[], [], []]

        # The last rank's kernel cache, emptied through the transport, is refilled by its
        # container (the folder is handed back to the image's user before the start).
        last = cluster.nodes[-1].name
        again, said = cli_json(
            capsys, "cluster", "start", str(release), "-c", cluster_file,
            "--empty-cache", f"kernels@{last}",
        )  # fmt: skip
        assert (again["image"], again["build"]) == (image, session["build"])
        assert f"image {image} reused" in said.replace("\n", " ")
        assert "image build step" not in said
        assert [t["node"] for t in again["emptied"]] == [last]
        compiled = {r["node"]: r["compiled"] for r in again["timeline"]["ranks"]}
        assert compiled[last] > 0
        assert all(compiled[n.name] == 0 for n in cluster.nodes if n.name != last)
        assert main(["cluster", "stop", "-c", cluster_file]) == 0
        assert containers(cluster) == [[], [], []]
    finally:
        main(["cluster", "stop", "-c", cluster_file])


def test_the_release_tests_gate_runs_pytest_inside_the_release_image(
    docker_lab: LabState, state: Path, tmp_path: Path
) -> None:
    """failing-test lays its own test over the image's tree: that file fails, the other passes."""
    assert docker_lab.cluster_file is not None
    cluster = load_model(docker_lab.cluster_file, Cluster)
    release = load_model(ROOT / "releases" / "faulty" / "failing-test.yaml", Release)
    kept = {"tests/test_engine_tokenizer.py", "tests/test_release_accents.py"}
    engine_tests = [f"tests/{p.name}" for p in (ROOT / "engine" / "tests").glob("test_*.py")]
    reason = "kept out to keep this lab test short"
    classification = tmp_path / "release-tests.yaml"
    classification.write_text(
        yaml.safe_dump({
            "extends": str(release.gates.release_tests.classification),
            "set": {"files": {n: {"gate": False, "excluded": True, "reason": reason}
                              for n in engine_tests if n not in kept}},
        })
    )  # fmt: skip
    said: list[str] = []
    out = tmp_path / "out"
    with TransportPool(cluster) as pool:
        context = GateContext(
            cluster=cluster, release=release, previous=None,
            transports={node.name: pool.node(node.name) for node in cluster.nodes},
            state=state, experiments=state / "experiments", say=said.append,
        )  # fmt: skip
        settings = ReleaseTestsGate(classification=classification, timeout_s=300)
        result = run_release_tests(context, settings, out)
    assert result.outcome == Outcome.FAILED, result.reason
    assert "tests/test_release_accents.py failed" in result.reason
    outcomes = {f["file"]: f["outcome"] for f in _summary(result)["files"]}
    assert outcomes == {
        "tests/test_engine_tokenizer.py": "passed",
        "tests/test_release_accents.py": "failed",
    }
    assert _summary(result)["changed"] == ["tests/test_release_accents.py"]
    assert {"junit.xml", "pytest.txt", "selection.json"} <= set(result.files)
    assert "test_accented_latin_text_round_trips" in (out / "pytest.txt").read_text()
    assert any("in the release image" in line for line in said)
    head = cluster.head.state_folder  # sparkgate's own folder, outside the workdir
    assert list((Path(head) / "release-tests").iterdir()) == []
    assert not (Path(cluster.head.workdir) / "release-tests").exists()
    assert containers(cluster) == [[], [], []]


def test_the_docker_runtime_builds_installs_and_runs_release_tests_in_its_image(
    docker_lab: LabState, state: Path, release: Path, tmp_path: Path
) -> None:
    """The runtime seam alone: build, install everywhere, list the image's tree, run pytest."""
    assert docker_lab.cluster_file is not None
    cluster = load_model(docker_lab.cluster_file, Cluster)
    chosen = load_model(release, Release)
    overlay = tmp_path / "test_overlay.py"
    overlay.write_text("def test_overlay_fails():\n    assert False\n")
    said: list[str] = []
    with TransportPool(cluster) as pool:
        transports = {node.name: pool.node(node.name) for node in cluster.nodes}
        runtime = runtime_for(cluster, transports, state, release=chosen)
        installed = runtime.install(runtime.build(chosen, said.append), said.append)
        assert installed.runtime == "docker"
        assert installed.image is not None
        assert installed.image.startswith("sparkengine:")
        assert sorted(n.node for n in installed.nodes) == sorted(n.name for n in cluster.nodes)
        host = runtime.release_tests(cluster.head.name, installed, said.append)
        assert "tests/test_engine_tokenizer.py" in host.list_tree()
        gate = ["tests/test_engine_tokenizer.py", "tests/test_overlay.py"]
        run = host.run_pytest(
            gate, {"tests/test_overlay.py": overlay}, tmp_path / "out", timeout=300
        )
    assert run.rc == 1, run.output[-2000:]
    assert run.junit_xml is not None
    assert "test_overlay_fails" in run.junit_xml
    assert run.files == ["pytest.txt", "junit.xml"]
    assert any("in the release image" in line for line in said)
    assert list((Path(cluster.head.state_folder) / "release-tests").iterdir()) == []
    assert containers(cluster) == [[], [], []]
