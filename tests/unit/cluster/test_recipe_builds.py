"""Issue 26 item 7: one image serves both shapes; the ring does not run the build again."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cluster.build import adopted_image as made
from flows.cluster.build.source_image import BuiltImage
from flows.cluster.transport.base import CommandResult
from flows.errors import BuildError
from flows.lines import silent
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "examples" / "spark-ds41f"
TAG = "vllm-ds41f-kkref:19f2c20ed4d6-r6y"


class Head:
    """dgx1's transport: a git checkout at one commit, and the recipe's build command, which
    refuses a tag that exists (bin/spark build image)."""

    def __init__(self) -> None:
        self.node, self.builds, self.tags = "dgx1", 0, set()  # type: str, int, set[str]

    def run(self, argv: list[str], **_: object) -> CommandResult:
        if argv[:2] == ["git", "-C"]:
            return self._done(argv, 0, "e0f962a" * 5 + "\n")
        assert argv[0] == "sh", argv
        self.builds += 1
        if TAG in self.tags:
            return self._done(argv, 1, f"{TAG} already exists")
        self.tags.add(TAG)
        return self._done(argv, 0, f"built {TAG} sha256:{'a' * 64} in 3600 s\n")

    def _done(self, argv: list[str], rc: int, out: str) -> CommandResult:
        return CommandResult(
            node="dgx1", argv=tuple(argv), rc=rc, stdout=out, stderr="", duration=1
        )


def test_the_ring_reuses_the_image_the_triangle_built_on_the_same_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = Head()

    def adopt(endpoint: object, reference: str, *, expected_id: str | None) -> BuiltImage:
        if reference not in head.tags:
            raise BuildError(f"no image {reference}")
        return BuiltImage(tag=reference, image_id="sha256:" + "b" * 64, source_digest="",
                          reused=True, seconds=0)  # fmt: skip

    monkeypatch.setattr(made, "adopt", adopt)
    release = load_model(RECIPE / "releases" / "r6y.yaml", Release)
    triangle = load_model(RECIPE / "clusters" / "tp3-triangle.yaml", Cluster)
    ring = load_model(RECIPE / "clusters" / "tp4-ring.yaml", Cluster)
    assert triangle.name != ring.name
    assert triangle.head.address == ring.head.address

    first = made.image_for(triangle, release, {"dgx1": head}, silent, tmp_path)  # type: ignore[dict-item]
    second = made.image_for(ring, release, {"dgx1": head}, silent, tmp_path)  # type: ignore[dict-item]
    assert head.builds == 1, "the ring ran the build again (the recipe refuses: tag exists)"
    assert second.built.image_id == first.built.image_id
    assert second.built.tag == TAG

    head.tags.clear()  # the image was removed from the head: build again
    made.image_for(ring, release, {"dgx1": head}, silent, tmp_path)  # type: ignore[dict-item]
    assert head.builds == 2


def test_the_build_key_follows_host_command_and_revision_not_the_cluster() -> None:
    release = load_model(RECIPE / "releases" / "r6y.yaml", Release)
    key = made.command_key("10.0.1.71", release.build, "abc")
    assert key == made.command_key("10.0.1.71", release.build, "abc")
    assert key != made.command_key("10.0.1.72", release.build, "abc")  # another daemon
    assert key != made.command_key("10.0.1.71", release.build, "abd")  # another checkout
