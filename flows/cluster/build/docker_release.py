"""The release image of a docker cluster boot: built once, on every node, the same image ID.

`sparkgate cluster start` and the gates' boots call `release_image_for` where the process
runtime builds and installs a virtual environment. The tag is content-addressed
(`<name>:<source12>-<release>`) and never moved, so a second boot of the same release reuses the
image on every node; a node that ends up with another image ID stops the boot.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from flows.cluster.build.release_image import ReleaseImage, build_release_image, docker_endpoints
from flows.errors import BuildError
from flows.spec.cluster import Cluster
from flows.spec.release import Release

Say = Callable[[str], None]


class LineProgress:
    """An ImageProgress that reports build steps and transfers as plain lines."""

    def __init__(self, say: Say | None) -> None:
        self._say = say or (lambda _line: None)

    def build_step(self, step: int, total: int, instruction: str) -> None:
        """One line per Dockerfile step."""
        self._say(f"image build step {step}/{total}: {instruction[:80]}")

    def build_output(self, line: str) -> None:
        """Builder output is not repeated (the build error carries its tail)."""

    def build_done(self, ok: bool) -> None:
        """The build's end."""
        self._say("image built" if ok else "image build failed")

    def transfer_start(self, node: str, total_bytes: int) -> None:
        """A transfer begins."""
        self._say(f"{node}: loading the image (about {total_bytes / 1e6:.0f} MB)")

    def transfer_advance(self, node: str, sent_bytes: int) -> None:
        """Progress within a transfer is not reported line by line."""

    def transfer_done(self, node: str, ok: bool) -> None:
        """A transfer's end."""
        self._say(f"{node}: image {'loaded' if ok else 'transfer failed'}")


def release_image_for(
    cluster: Cluster, release: Release, state: Path, say: Say | None = None
) -> ReleaseImage:
    """Build (or reuse) the release's image on the head's daemon, load it everywhere, verify."""
    head, *others = docker_endpoints(cluster, release)
    source = release.build.source
    image = build_release_image(
        head,
        others,
        release.name,
        source,
        state / "cache" / "docker",
        dockerfile=source / release.build.dockerfile,
        build_args={name: str(value) for name, value in release.build.args.items()},
        progress=LineProgress(say),
    )
    wrong = [n.facts.node for n in image.nodes if n.facts.image_id != image.built.image_id]
    if wrong:
        raise BuildError(
            f"{image.built.tag}: image ID differs from {image.built.image_id} on {', '.join(wrong)}"
        )
    if say:
        verb = "reused" if image.built.reused else "built"
        say(f"image {image.built.tag} {verb}, same ID on {len(image.nodes)} nodes")
    return image
