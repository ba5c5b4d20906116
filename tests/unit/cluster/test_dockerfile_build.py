"""The dockerfile build kind: its spec rules, the docker CLI command, and its refusals.

The recipe builds `docker/Dockerfile` with named contexts on a vLLM base pinned by digest
(`ds41f:docker/Dockerfile`); these are the pure parts of building such a file: what the release
must say, the argv run against the build daemon, which images the build would pull (refused
offline when absent), the architecture check, and the refusal of named contexts without buildx.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.cli import main
from flows.cluster.build import dockerfile as kind
from flows.cluster.build.adopted_image import resumed_image, run_release
from flows.cluster.build.dockerfile import (
    arch_problem,
    build_argv,
    build_endpoint,
    builder_env,
    docker_arch,
    pulled_images,
    refusal,
    render_tag,
)
from flows.cluster.build.release_image import ImageBuild
from flows.cluster.build.source_image import BuiltImage
from flows.cluster.runtime.factory import check_fits
from flows.errors import SpecError
from flows.spec.build import Build
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release
from tests.support.overlays import overlay, release_overlay

ROOT = Path(__file__).resolve().parents[3]
IMAGE_ID = "sha256:" + "ef" * 32
BASE = "docker.io/vllm/vllm-openai@sha256:" + "3c" * 32
RELEASE = """\
kind: release
name: r7
previous: null
build:
{build}
outputs:
  change: changed
  reason: first release here
gates:
  release_tests:
    classification: {classification}
  determinism:
    against_previous: false
  benchmark:
    enabled: false
"""
DOCKERFILE = """\
  kind: dockerfile
  context: build/context/empty
  dockerfile: ../../../docker/Dockerfile
  args: {VLLM_COMPILE_JOBS: 8, HF_TOKEN: hunter2-secret}
  contexts:
    vllm-source: ../vllm-source
    base: docker-image://busybox:1.36
  target: runtime
  on: controller
  platform: linux/arm64
"""
# The shape of the recipe's docker/Dockerfile: a syntax line, a global ARG with a digest, named
# stages, COPY --from named contexts and stages, a RUN --mount from a stage.
RECIPE_LIKE = f"""\
# syntax=docker/dockerfile:1.7

ARG BASE_IMAGE={BASE}
ARG RUNTIME_STAGE=runtime

FROM ${{BASE_IMAGE}} AS vllm-native-builder
COPY --from=vllm-source . /workspace/vllm/
RUN apt-get update \\
    && echo done

FROM ${{BASE_IMAGE}} AS runtime
COPY --from=vllm-native-builder /opt/x /opt/x
COPY --from=base /bin/busybox /bin/
RUN --mount=type=bind,from=vllm-native-builder,source=/opt,target=/tmp/o true

FROM runtime AS runtime-tilelang
COPY --from=ghcr.io/example/tools:1 /t /t
"""


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "build" / "context" / "empty").mkdir(parents=True)
    (tmp_path / "build" / "context" / "vllm-source").mkdir()
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "Dockerfile").write_text(RECIPE_LIKE)
    return tmp_path


def _release(tmp_path: Path, build: str) -> Release:
    file = tmp_path / "r7.yaml"
    classification = ROOT / "config" / "release-tests.yaml"
    file.write_text(RELEASE.format(build=build, classification=classification))
    return load_model(file, Release)


def _docker_cluster(tmp_path: Path, **builds: object) -> Cluster:
    runtime: dict[str, object] = {"kind": "docker", "daemon": "unix:///run/dock-{node}.sock"}
    if builds:
        runtime["builds"] = builds
    file = overlay(tmp_path / "config" / "dock.yaml", "config/local.yaml", name="dock",
                   runtime=runtime)  # fmt: skip
    return load_model(file, Cluster)


def test_a_dockerfile_build_loads_with_paths_resolved_and_says_where_it_runs(
    tmp_path: Path,
) -> None:
    build = _release(_tree(tmp_path), DOCKERFILE).build
    assert build.makes_image
    assert build.context == tmp_path / "build" / "context" / "empty"
    assert build.dockerfile_path == tmp_path / "docker" / "Dockerfile"
    assert build.context_folders == {"vllm-source": tmp_path / "build" / "context" / "vllm-source"}
    assert build.describe() == (
        f"dockerfile ../../../docker/Dockerfile in {build.context} on the controller, "
        "target runtime, named contexts base, vllm-source"
    )


@pytest.mark.parametrize(
    ("build", "says"),
    [
        ("  kind: dockerfile\n", "build.context: a dockerfile build needs it"),
        (
            "  kind: dockerfile\n  context: .\n  command: [make]\n",
            "build.command: not a key of a dockerfile build",
        ),
        ("  kind: dockerfile\n  context: .\n  image: x:1\n", "a dockerfile build names it `tag`"),
        ("  kind: dockerfile\n  context: .\n  tag: 'x:{nope}'\n", "build.tag: bad placeholder"),
        ("  kind: dockerfile\n  context: .\n  tag: 'Upper:{stamp}'\n", "not an image tag"),
        (
            "  kind: dockerfile\n  context: .\n  dockerfile: /etc/hostname\n",
            "build.dockerfile: outside the project",
        ),
        (
            "  kind: dockerfile\n  context: build/context/empty\n  contexts: {a: /etc}\n",
            "build.contexts.a: outside the project",
        ),
        (
            "  kind: dockerfile\n  context: .\n  contexts: {a: 'docker-image://Bad Ref'}\n",
            "build.contexts.a: not an image reference",
        ),
        (
            "  kind: image\n  image: x:1\n  target: runtime\n",
            "build.target: not a key of an image build",
        ),
        (
            "  kind: command\n  command: [make]\n  image: x:1\n  tag: 'a:{stamp}'\n",
            "build.tag: not a key of a command build",
        ),
    ],
)
def test_a_dockerfile_build_names_what_is_missing_wrong_or_foreign(
    tmp_path: Path, build: str, says: str
) -> None:
    _tree(tmp_path)
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    with pytest.raises(SpecError) as raised:
        _release(tmp_path, build)
    assert says in str(raised.value)
    assert "r7.yaml:" in str(raised.value)
    assert raised.value.exit_code == 2


def test_the_buildx_command_passes_args_contexts_target_platform_and_stays_offline(
    tmp_path: Path,
) -> None:
    build = _release(_tree(tmp_path), DOCKERFILE).build
    argv = build_argv(build, builder="buildx", tag="sparkgate/r7:t", args={"A": "1"},
                      network=False, iidfile="/tmp/iid")  # fmt: skip
    context = tmp_path / "build" / "context"
    assert argv == [
        "docker", "buildx", "build", "--load",
        "--file", str(tmp_path / "docker" / "Dockerfile"), "--tag", "sparkgate/r7:t",
        "--iidfile", "/tmp/iid", "--build-arg", "A=1",
        "--build-context", f"vllm-source={context / 'vllm-source'}",
        "--build-context", "base=docker-image://busybox:1.36",
        "--target", "runtime", "--platform", "linux/arm64", "--network", "none",
        "--progress", "plain", str(context / "empty"),
    ]  # fmt: skip
    assert builder_env("buildx", "ssh://spark@n0") == {
        "DOCKER_HOST": "ssh://spark@n0", "DOCKER_BUILDKIT": "1"
    }  # fmt: skip


def test_the_classic_builder_refuses_named_contexts_and_builds_a_plain_file(
    tmp_path: Path,
) -> None:
    build = _release(_tree(tmp_path), DOCKERFILE).build
    problem = refusal(build, "classic")
    assert problem is not None
    assert "(base, vllm-source)" in problem
    assert "docker buildx" in problem
    assert refusal(build, "buildx") is None
    plain = build.model_copy(update={"contexts": {}, "target": None, "platform": None})
    assert refusal(plain, "classic") is None
    argv = build_argv(plain, builder="classic", tag="t:1", args={}, network=True, iidfile="i")
    assert argv[:2] == ["docker", "build"]
    assert not {"--network", "--build-context", "--load"} & set(argv)
    assert builder_env("classic", "unix:///d.sock")["DOCKER_BUILDKIT"] == "0"


def test_named_contexts_without_buildx_are_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = _release(_tree(tmp_path), DOCKERFILE)
    cluster = _docker_cluster(tmp_path)
    monkeypatch.setattr(kind, "probe_builder", lambda env=None: "classic")
    with pytest.raises(SpecError, match="only BuildKit through docker buildx") as raised:
        check_fits(cluster, release)
    assert raised.value.exit_code == 2
    assert "build.contexts" in str(raised.value)
    monkeypatch.setattr(kind, "probe_builder", lambda env=None: "buildx")
    check_fits(cluster, release)
    elsewhere = release.model_copy(
        update={"build": release.build.model_copy(update={"on": "nowhere"})}
    )
    with pytest.raises(SpecError, match="no node 'nowhere'"):
        check_fits(cluster, elsewhere)


def test_the_build_daemon_is_a_nodes_or_the_controllers(tmp_path: Path) -> None:
    release = _release(_tree(tmp_path), DOCKERFILE)
    cluster = _docker_cluster(tmp_path, controller_daemon="unix:///run/controller.sock")
    controller = build_endpoint(cluster, release)
    assert (controller.node, controller.base_url) == ("controller", "unix:///run/controller.sock")
    on_head = release.model_copy(update={"build": release.build.model_copy(update={"on": None})})
    head = build_endpoint(cluster, on_head)
    assert (head.node, head.base_url) == ("local0", "unix:///run/dock-local0.sock")


def test_offline_the_build_needs_every_image_it_would_pull_and_nothing_else() -> None:
    contexts = {"vllm-source": "/x", "base": "docker-image://busybox:1.36"}
    assert pulled_images(RECIPE_LIKE, {}, contexts) == [
        "docker/dockerfile:1.7", BASE, "ghcr.io/example/tools:1", "busybox:1.36"
    ]  # fmt: skip
    # a build arg replaces the global ARG's default; a named context replaces an image
    other = "registry.example/vllm:2"
    assert pulled_images(RECIPE_LIKE, {"BASE_IMAGE": other}, contexts)[1] == other
    assert BASE not in pulled_images(RECIPE_LIKE, {}, {**contexts, BASE: "/y"})
    assert pulled_images("FROM scratch\nCOPY a /a\n", {}, {}) == []


def test_an_image_for_another_architecture_than_the_nodes_is_refused() -> None:
    assert docker_arch("x86_64") == "amd64"
    assert docker_arch("aarch64") == "arm64"
    nodes = {"spark1": "aarch64", "spark2": "aarch64"}
    assert arch_problem("image t:1", "arm64", nodes) is None
    problem = arch_problem("image t:1 built on controller", "amd64", nodes)
    assert problem is not None
    assert "is amd64, but the nodes run spark1 arm64, spark2 arm64" in problem
    assert "build.platform" in problem


def test_the_tag_carries_the_release_and_the_build_time() -> None:
    from datetime import UTC, datetime  # noqa: PLC0415

    when = datetime(2026, 12, 3, 19, 5, 7, tzinfo=UTC)
    assert render_tag("sparkgate/{release}:{stamp}", "R7", when) == "sparkgate/r7:20261203t190507"


def test_a_built_image_is_pinned_for_the_run_and_resumed_without_building_again(
    tmp_path: Path,
) -> None:
    release = _release(_tree(tmp_path), DOCKERFILE)
    made = ImageBuild(
        built=BuiltImage(tag="sparkgate/r7:t", image_id=IMAGE_ID, source_digest="",
                         reused=False, seconds=3.0),
        base_image="", lock_digest="", seconds={}, origin="dockerfile", built_on="controller",
    )  # fmt: skip
    assert made.verb == "built"
    # the rest of the run adopts it from the daemon that built it (the controller's here)
    assert run_release(release, made).build == Build(
        kind="image", image="sparkgate/r7:t", image_id=IMAGE_ID, on="controller"
    )
    unfinished = {
        "origin": "dockerfile", "built_on": "controller",
        "built": {"tag": "sparkgate/r7:t", "image_id": IMAGE_ID},
    }  # fmt: skip
    resumed = resumed_image(release, unfinished)
    assert resumed is not None
    assert (resumed.build.kind, resumed.build.image_id) == ("image", IMAGE_ID)
    assert resumed.build.on == "controller"
    assert resumed_image(release, {**unfinished, "origin": "command"}) is None


def test_qualify_plan_shows_the_build_command_with_secrets_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path))
    monkeypatch.setenv("SPARKGATE_STATE_DIR", str(tmp_path / ".sparkgate"))
    monkeypatch.setattr(kind, "probe_builder", lambda env=None: "buildx")
    import flows.pipeline.plan as plan_module  # noqa: PLC0415

    monkeypatch.setattr(plan_module, "probe_builder", lambda env=None: "buildx")
    _tree(tmp_path)
    cluster = overlay(tmp_path / "config" / "dock.yaml", "config/local.yaml", name="dock",
                      runtime={"kind": "docker", "daemon": "unix:///run/dock-{node}.sock",
                               "builds": {"network": True}})  # fmt: skip
    build = {
        "kind": "dockerfile", "context": str(tmp_path / "build" / "context" / "empty"),
        "dockerfile": "../../../docker/Dockerfile", "args": {"HF_TOKEN": "hunter2-secret"},
        "contexts": {"vllm-source": "../vllm-source"},
    }  # fmt: skip
    release = release_overlay(tmp_path / "releases" / "r1.yaml", build=build)
    release.write_text(release.read_text() + "unset: [build.source]\n")
    capsys.readouterr()
    assert main(["qualify", str(release), "-c", str(cluster), "--plan", "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    step = next(s for s in steps if s["stage"] == "build")
    assert step["node"] == "local0"
    assert step["action"] == "build the release's Dockerfile"
    detail = step["detail"]
    assert detail["argv"][:4] == ["docker", "buildx", "build", "--load"]
    assert "sparkgate/r1:<stamp>" in detail["argv"]
    assert f"vllm-source={tmp_path / 'build' / 'context' / 'vllm-source'}" in detail["argv"]
    assert "hunter2-secret" not in json.dumps(steps)
    assert "--network" not in detail["argv"]  # the cluster allows it
    assert detail["env"] == {"DOCKER_HOST": "unix:///run/dock-local0.sock", "DOCKER_BUILDKIT": "1"}
    assert detail["pull"].startswith("refused")
    assert not (tmp_path / ".sparkgate").exists()


def test_a_bare_on_key_names_the_build_node_though_yaml_reads_it_as_true(tmp_path: Path) -> None:
    """YAML 1.1 reads `on:` as the boolean true; it failed as "Keys should be strings"."""
    build = "  kind: command\n  command: [make]\n  image: x:1\n  on: local1\n"
    assert _release(tmp_path, build).build.on == "local1"
    assert _release(_tree(tmp_path), DOCKERFILE).build.on == "controller"


def test_an_image_built_or_adopted_on_another_daemon_is_adopted_there(tmp_path: Path) -> None:
    """A pinned image is looked up where it was built: a command run on a worker, or the
    controller's daemon; a build command itself never runs on the controller."""
    cluster = _docker_cluster(tmp_path, controller_daemon="unix:///run/controller.sock")
    on_worker = _release(tmp_path, "  kind: image\n  image: x:1\n  on: local1\n")
    assert on_worker.build.describe() == "image x:1, adopted as is from local1"
    assert build_endpoint(cluster, on_worker).base_url == "unix:///run/dock-local1.sock"
    made = ImageBuild(
        built=BuiltImage(tag="x:1", image_id=IMAGE_ID, source_digest="", reused=True, seconds=0),
        base_image="", lock_digest="", seconds={}, origin="command", built_on="local1",
    )  # fmt: skip
    command = _release(tmp_path, "  kind: command\n  command: [make]\n  image: x:1\n  on: local1\n")
    assert run_release(command, made).build.on == "local1"
    with pytest.raises(SpecError, match=r"build\.on: a build command runs on a node"):
        _release(tmp_path, "  kind: command\n  command: [make]\n  image: x:1\n  on: controller\n")


@pytest.mark.parametrize(
    ("build", "says"),
    [
        ("  kind: dockerfile\n  context: nowhere\n", "release r7: no such directory"),
        ("  kind: dockerfile\n  context: .\n  dockerfile: missing\n", "release r7: no such file"),
        (
            (
                "  kind: dockerfile\n  context: build/context/empty\n  contexts: {a: ../missing}\n"
                "  dockerfile: ../../../docker/Dockerfile\n"
            ),
            "build.contexts.a: release r7: no such directory",
        ),
    ],
)
def test_a_missing_input_is_refused_before_a_build_but_not_when_loading(
    tmp_path: Path, build: str, says: str
) -> None:
    """A deploy runs the recorded image and loads the release without its build inputs."""
    release = _release(_tree(tmp_path), build)
    with pytest.raises(SpecError) as raised:
        check_fits(_docker_cluster(tmp_path), release)
    assert says in str(raised.value)
    assert "build.c" in str(raised.value) or "build.dockerfile" in str(raised.value)
    assert raised.value.exit_code == 2
