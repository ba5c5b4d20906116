"""`sparkgate image build`: every build kind goes through the cluster's runtime (build, then
install), a process cluster is refused naming the release file, and a build's own spec error
names the file and line that set its key (never `<input>`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from flows.cli import main
from flows.cluster.build.distribute import ImageFacts, NodeImage
from flows.cluster.build.release_image import ImageBuild
from flows.cluster.build.source_image import BuiltImage
from flows.cluster.ops import lock
from flows.cluster.runtime import factory
from flows.cluster.runtime.base import Build, Installed, NodeInstall
from flows.lines import LineSink
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release
from tests.support.overlays import release_overlay

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "examples" / "spark-ds41f"
R6Y = RECIPE / "releases" / "r6y.yaml"
TAG = "vllm-ds41f-kkref:19f2c20ed4d6-r6y"
IMAGE_ID = "sha256:" + "a" * 64
NODES = ("spark1", "spark2", "spark3")


class FakeLock:
    """The cluster lock as the command takes it: where (node and path), and whether held."""

    held: ClassVar[list[str]] = []
    taken: ClassVar[list[str]] = []

    def __init__(self, transport: Any, settings: Any) -> None:
        self.where = f"{transport.node} {settings.path}"

    def __enter__(self) -> FakeLock:
        FakeLock.held.append(self.where)
        FakeLock.taken.append(self.where)
        return self

    def __exit__(self, *_: object) -> None:
        FakeLock.held.remove(self.where)


class FakeRuntime:
    """What `runtime_for` hands the command: records the release it builds and what it installs
    (and that the cluster lock is held while it does)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.calls: list[tuple[str, str]] = []

    def build(self, release: Release, say: LineSink) -> ImageBuild:
        assert len(FakeLock.held) == 1, "built without the cluster lock"
        self.calls.append(("build", f"{release.name} {release.build.kind}"))
        say(f"built {TAG} sha256:{'a' * 64} in 3600 s")
        built = BuiltImage(tag=TAG, image_id=IMAGE_ID, source_digest="", reused=True, seconds=3600)
        return ImageBuild(
            built=built, base_image="", lock_digest="", seconds={"build": 3600.0},
            origin=release.build.kind, built_on=NODES[0],
        )  # fmt: skip

    def install(
        self, build: Build, say: LineSink, *, nodes: Sequence[str] | None = None
    ) -> Installed:
        assert isinstance(build, ImageBuild)
        assert nodes is None
        assert len(FakeLock.held) == 1, "installed without the cluster lock"
        self.calls.append(("install", build.built.tag))
        copies = [
            NodeInstall(node=node, reused=True, verified=NodeImage(
                facts=ImageFacts(node=node, image_id=IMAGE_ID, layers=("sha256:l1", "sha256:l2"),
                                 config_digest="sha256:c", size=1),
                match="same-id",
            ))
            for node in NODES
        ]  # fmt: skip
        return Installed(
            runtime="operator", release="r6y", digest=IMAGE_ID, image=TAG, nodes=copies,
            summary=[f"{TAG} {build.verb}", f"same image ID on {len(copies)} nodes"],
        )  # fmt: skip


@pytest.fixture
def runtimes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[FakeRuntime, Any]]:
    """Every runtime the command asked `runtime_for` for, with the progress it passed."""
    monkeypatch.setenv("SPARKGATE_STATE_DIR", str(tmp_path / "state"))
    made: list[tuple[FakeRuntime, Any]] = []

    def runtime_for(cluster: Any, transports: Any, state: Any, **given: Any) -> FakeRuntime:
        assert given["release"].name == "r6y"
        assert state is not None
        assert set(transports) == {node.name for node in cluster.nodes}
        made.append((FakeRuntime(cluster.runtime.kind), given.get("progress")))
        return made[-1][0]

    monkeypatch.setattr(factory, "runtime_for", runtime_for)
    monkeypatch.setattr(lock, "ClusterLock", FakeLock)
    monkeypatch.setattr(FakeLock, "held", [])
    monkeypatch.setattr(FakeLock, "taken", [])
    return made


@pytest.mark.parametrize("cluster", ["tp3-triangle-operator", "tp3-triangle"])
def test_a_command_build_is_built_and_installed_by_the_clusters_runtime(
    cluster: str, runtimes: list[tuple[FakeRuntime, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    """r6y's `bin/spark build image --apply` is the runtime's to run: before, the command built
    from a source tree and failed with `<input>: build.kind: a command build has no source tree`."""
    cluster_file = RECIPE / "clusters" / f"{cluster}.yaml"
    assert main(["image", "build", str(R6Y), "--cluster", str(cluster_file), "--json"]) == 0
    captured = capsys.readouterr()
    [(runtime, progress)] = runtimes
    assert runtime.calls == [("build", "r6y command"), ("install", TAG)]
    assert progress is not None  # the bars draw what the runtime reports
    result = json.loads(captured.out)
    assert (result["release"], result["origin"], result["verb"]) == ("r6y", "command", "adopted")
    assert result["built"]["tag"] == TAG
    assert result["built_on"] == NODES[0]
    assert [node["facts"]["node"] for node in result["nodes"]] == list(NODES)
    assert set(result["seconds"]) == {"build", "distribute"}
    assert "built " + TAG in captured.err  # what the runtime said is shown


def test_the_build_takes_the_cluster_lock_on_the_head(
    runtimes: list[tuple[FakeRuntime, Any]],
) -> None:
    """The lock a qualification takes, held through build and install (FakeRuntime checks):
    before, `image build` took none, and could build the same tag beside a qualification."""
    cluster_file = RECIPE / "clusters" / "tp3-triangle.yaml"
    assert main(["image", "build", str(R6Y), "--cluster", str(cluster_file)]) == 0
    head = load_model(cluster_file, Cluster).head
    [where] = FakeLock.taken
    node, path = where.split(" ", 1)
    assert node == head.name
    assert not path.startswith(f"{head.workdir}/")  # outside the recipe's checkout
    assert FakeLock.held == []  # given back


def test_the_table_says_the_image_was_adopted_on_every_node(
    runtimes: list[tuple[FakeRuntime, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster_file = RECIPE / "clusters" / "tp3-triangle-operator.yaml"
    assert main(["image", "build", str(R6Y), "--cluster", str(cluster_file)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"{TAG} (adopted)" in err
    assert "same image on 3 nodes" in err
    assert all(node in err for node in NODES)


@pytest.mark.parametrize(
    ("release", "kind"),
    [(str(R6Y), "command"), (str(ROOT / "releases" / "r1.yaml"), "source")],
    ids=["r6y", "r1"],
)
def test_a_process_cluster_is_refused_naming_the_release_file_before_anything_starts(
    release: str, kind: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def runtime_for(*_: object, **__: object) -> None:
        raise AssertionError("nothing may start for a refused build")

    monkeypatch.setattr(factory, "runtime_for", runtime_for)
    local = ROOT / "config" / "local.yaml"
    assert main(["image", "build", release, "--cluster", str(local)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith(f"{release}")
    assert ": build.kind: cluster local" in err
    assert str(local) in err
    assert f"a {kind} build" in err
    assert "runtime.kind docker or operator" in err
    assert "<input>" not in err


def test_a_build_error_names_the_release_file_and_line_that_set_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runtime's own SpecError knows only its key (`build.on`): it is pointed at the file."""
    monkeypatch.setenv("SPARKGATE_STATE_DIR", str(tmp_path / "state"))
    release_overlay(tmp_path / "r6x.yaml", RECIPE / "releases" / "r6x.yaml")  # its previous
    release = release_overlay(tmp_path / "r6y.yaml", R6Y, build={"on": "nowhere"})
    cluster_file = RECIPE / "clusters" / "tp3-triangle.yaml"
    assert main(["image", "build", str(release), "--cluster", str(cluster_file)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    line = next(
        number
        for number, text in enumerate(release.read_text().splitlines(), 1)
        if "nowhere" in text
    )
    assert err.startswith(f"{release}:{line}: build.on: no node 'nowhere' in cluster")
