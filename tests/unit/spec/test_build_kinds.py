"""The three build kinds: what each needs, how a command's image is named, and where each runs.

A release of the recipe names its image (prebuilt, or made by `bin/spark build image --apply`)
instead of a source tree; these are its spec rules and the pure parts of adopting the image.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main
from flows.cluster.build.adopted_image import (
    build_node,
    pinned,
    resumed_image,
    run_release,
    tag_from_file,
    tag_from_output,
)
from flows.cluster.build.release_image import ImageBuild
from flows.cluster.build.source_image import BuiltImage
from flows.cluster.runtime.factory import check_fits
from flows.errors import SpecError
from flows.spec.build import Build
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release

ROOT = Path(__file__).resolve().parents[3]
IMAGE_ID = "sha256:" + "ab" * 32
RELEASE = """\
kind: release
name: r6x
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
COMMAND = """\
  kind: command
  command: [bin/spark, --cluster-config, config/cluster.json, build, image, --apply]
  cwd: /home/spark/spark-ds41f
  image_line: '^built (vllm-ds41f-kkref:\\S+)$'
"""


def _release(tmp_path: Path, build: str) -> Release:
    file = tmp_path / "r6x.yaml"
    classification = ROOT / "config" / "release-tests.yaml"
    file.write_text(RELEASE.format(build=build, classification=classification))
    return load_model(file, Release)


def _error(tmp_path: Path, build: str) -> str:
    with pytest.raises(SpecError) as raised:
        _release(tmp_path, build)
    return str(raised.value)


def test_a_command_build_loads_and_says_where_it_runs(tmp_path: Path) -> None:
    release = _release(tmp_path, COMMAND)
    assert release.build.makes_image
    assert release.build.describe() == (
        "command `bin/spark --cluster-config config/cluster.json build image --apply` on the head "
        "in /home/spark/spark-ds41f, tag printed as /^built (vllm-ds41f-kkref:\\S+)$/"
    )


def test_an_adopted_image_may_be_pinned_to_its_id(tmp_path: Path) -> None:
    release = _release(
        tmp_path,
        f"  kind: image\n  image: vllm-ds41f-kkref:19f2c20ed4d6-r6x\n  image_id: {IMAGE_ID}\n",
    )
    assert release.build.image_id == IMAGE_ID
    assert release.build.describe().endswith(f"(pinned to {IMAGE_ID}), adopted as is")


@pytest.mark.parametrize(
    ("build", "says"),
    [
        ("  kind: image\n", "r6x.yaml:4: build.image: an image build needs it"),
        ("  kind: image\n  image: x:1\n  source: .\n", "build.source: not a key of an image build"),
        ("  kind: command\n  image: x:1\n", "build.command: a command build needs it"),
        (
            "  kind: command\n  command: [make]\n  image: x:1\n  image_file: tag.txt\n",
            "build.image: a command build names its image in exactly one way",
        ),
        ("  kind: command\n  command: [make]\n  image_line: 'no group'\n", "0 groups"),
        ("  kind: command\n  command: [make]\n  image: x:1\n  cwd: relative\n", "build.cwd"),
        ("  kind: image\n  image: x:1\n  image_id: sha256:short\n", "build.image_id"),
        ("  kind: source\n", "build.source: a source build needs it"),
    ],
)
def test_each_kind_names_what_is_missing_or_foreign(tmp_path: Path, build: str, says: str) -> None:
    assert says in _error(tmp_path, build)


def test_the_image_name_comes_from_the_last_matching_line_or_the_first_line_of_a_file() -> None:
    output = "step 1/9\nbuilt vllm-ds41f-kkref:aaaa-r6w\nretag\nbuilt vllm-ds41f-kkref:bbbb-r6x\n"
    assert tag_from_output(r"^built (\S+)$", output) == "vllm-ds41f-kkref:bbbb-r6x"
    assert tag_from_output(r"^built (\S+)$", "nothing here\n") is None
    assert (
        tag_from_file("\n  vllm-ds41f-kkref:bbbb-r6x  \nignored\n") == "vllm-ds41f-kkref:bbbb-r6x"
    )
    assert tag_from_file("\n\n") is None


def test_the_build_node_is_the_head_unless_named_and_must_exist(tmp_path: Path) -> None:
    cluster = load_model(ROOT / "config" / "local.yaml", Cluster)
    release = _release(tmp_path, COMMAND)
    assert build_node(cluster, release.build) == cluster.head.name
    elsewhere = release.build.model_copy(update={"on": "nowhere"})
    with pytest.raises(SpecError, match="no node 'nowhere'"):
        build_node(cluster, elsewhere)


def test_after_the_build_stage_a_run_boots_the_image_id_it_made(tmp_path: Path) -> None:
    release = _release(tmp_path, COMMAND)
    made = ImageBuild(
        built=BuiltImage(tag="vllm-ds41f-kkref:bbbb-r6x", image_id=IMAGE_ID, source_digest="",
                         reused=True, seconds=1.0),
        base_image="", lock_digest="", seconds={}, origin="command",
    )  # fmt: skip
    runs = run_release(release, made)
    assert runs.build == Build(kind="image", image="vllm-ds41f-kkref:bbbb-r6x", image_id=IMAGE_ID)
    assert runs.name == release.name
    assert made.verb == "adopted"
    assert pinned(release, "t:1", IMAGE_ID).build.image_id == IMAGE_ID


def test_an_image_build_is_refused_on_a_process_cluster_before_anything_starts(
    tmp_path: Path,
) -> None:
    cluster = load_model(ROOT / "config" / "local.yaml", Cluster)
    with pytest.raises(SpecError, match="runs ranks as processes") as raised:
        check_fits(cluster, _release(tmp_path, COMMAND))
    assert raised.value.exit_code == 2
    check_fits(cluster, load_model(ROOT / "releases" / "r1.yaml", Release))  # a source build fits


def test_a_resumed_qualification_boots_the_image_its_command_made_without_running_it(
    tmp_path: Path,
) -> None:
    """The recipe refuses to rebuild an existing tag: resuming adopts the recorded image."""
    release = _release(tmp_path, COMMAND)
    unfinished = {
        "origin": "command",
        "built": {"tag": "vllm-ds41f-kkref:b-r6y", "image_id": IMAGE_ID},
    }
    resumed = resumed_image(release, unfinished)
    assert resumed is not None
    assert resumed.build == Build(kind="image", image="vllm-ds41f-kkref:b-r6y", image_id=IMAGE_ID)
    assert resumed_image(release, None) is None  # nothing to resume: the command runs
    assert resumed_image(release, {**unfinished, "origin": "source"}) is None
    shipped = load_model(ROOT / "releases" / "r1.yaml", Release)
    assert resumed_image(shipped, unfinished) is None  # a source build is content-addressed


@pytest.mark.parametrize(
    "command", [["qualify", "--plan"], ["cluster", "start"], ["calibrate", "--arms", "2"]]
)
def test_each_command_names_the_release_line_that_asks_for_an_image_on_a_process_cluster(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The refusal is the release file's, at the line of its `build.kind`, not `<input>`'s
    (`cluster start` used to reach the source build and say "a command build has no source
    tree"; `calibrate` refused inside its flow, exit 1); nothing starts (exit 2)."""
    monkeypatch.setenv("SPARKGATE_STATE_DIR", str(tmp_path / "state"))
    r6y = ROOT / "examples" / "spark-ds41f" / "releases" / "r6y.yaml"
    line = next(
        n for n, text in enumerate(r6y.read_text().splitlines(), 1) if "kind: command" in text
    )
    verb, *options = command
    argv = [verb, str(r6y), *options] if verb != "cluster" else [*command, str(r6y)]
    assert main([*argv, "-c", str(ROOT / "config" / "local.yaml")]) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert f"{r6y}:{line}: build.kind: release r6y adopts an image (build.kind command)" in said
    assert "runs ranks as processes" in said
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*.lock"))
