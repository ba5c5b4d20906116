"""Images the operator makes: a prebuilt image adopted as is, or the one their build command made.

The recipe builds its image with its own command (`bin/spark build image --apply`) from a
BuildKit Dockerfile sparkgate does not know, so sparkgate does not build it: it runs that command
on the build node (default the head) through the node's transport, finds the image's name (given,
written to a file, or printed on a line), and looks the image up on that node's daemon. A
prebuilt image is looked up the same way, without a command. Either way the image ID is what the
record keeps and what every node must hold; `pinned` turns the release into one that names that
ID, so later boots of the run, promotion and deploys adopt exactly that image and never build.

The operator's `image_line` regex is matched only against the output's last `MATCHED_TAIL`
characters, line by line up to `LINE_LIMIT` characters each, in a child process given
`MATCH_TIME_S`: a pattern that backtracks catastrophically ends as a `BuildError` naming it,
not as a build stage that never returns.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import re
import shlex
import time
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from flows.cluster.build.distribute import inspect_facts
from flows.cluster.build.dockerfile import build_endpoint
from flows.cluster.build.release_image import ImageBuild
from flows.cluster.build.source_image import BuiltImage
from flows.cluster.build.wheel import ProcessBuild
from flows.cluster.transport.base import Transport
from flows.cluster.transport.docker_client import DockerEndpoint, connect
from flows.errors import BuildError, SpecError
from flows.fileio import write_text
from flows.lines import LineSink
from flows.spec.build import CONTROLLER, Build
from flows.spec.cluster import Cluster
from flows.spec.release import Release

OUTPUT_TAIL = 600
MATCHED_TAIL = 1 << 20
"""How much of the command's output (its end) `image_line` is matched against."""
LINE_LIMIT = 4096
"""Longer lines are not matched: an image name is printed on a short line."""
MATCH_TIME_S = 20.0
"""How long matching `image_line` may take before it is given up."""
ReleaseBuild = ProcessBuild | ImageBuild
"""What a run's build stage made: a wheel (source builds) or an image (any build, docker)."""


# -- pure ----------------------------------------------------------------------------------------


def tag_from_output(pattern: str, output: str) -> str | None:
    """The image name the build command printed: the group of the pattern's last match."""
    found = None
    for line in output[-MATCHED_TAIL:].splitlines():
        if len(line) > LINE_LIMIT:
            continue
        match = re.search(pattern, line)
        if match is not None and match.group(1):
            found = match.group(1).strip()
    return found


def tag_from_file(text: str) -> str | None:
    """The image name in a file the build command wrote: its first non-empty line."""
    return next((line.strip() for line in text.splitlines() if line.strip()), None)


def build_node(cluster: Cluster, build: Build) -> str:
    """The node whose daemon holds the image: `on`, or the head (or `controller`: its daemon)."""
    if build.on == CONTROLLER and build.kind != "command":
        return CONTROLLER
    name = build.on or cluster.head.name
    if name not in {node.name for node in cluster.nodes}:
        raise SpecError(
            f"no node {name!r} in cluster {cluster.name}", key="build.on", expected="a node name"
        )
    return name


def pinned(release: Release, tag: str, image_id: str, on: str | None = None) -> Release:
    """The release as an adopted image with this exact ID (what the rest of a run boots), held
    by the daemon `on` (a node, or the controller's; None: the head's)."""
    build = Build(kind="image", image=tag, image_id=image_id, on=on)
    return release.model_copy(update={"build": build})


def resumed_image(release: Release, unfinished: Any) -> Release | None:
    """A command- or dockerfile-built release pinned to the image its unfinished record was
    qualifying.

    Resuming must not build again: the recipe refuses to rebuild a tag that exists, and a new
    image would start the qualification over. None when there is nothing to resume (no record,
    another kind of build, or a build.json without an image).
    """
    if release.build.kind not in ("command", "dockerfile"):
        return None
    return recorded_image(release, unfinished)


def recorded_image(release: Release, build_json: Any) -> Release | None:
    """An image-made release pinned to the image a record's build.json names (None: the
    record's build was of another kind, or names no image)."""
    if not release.build.makes_image or not isinstance(build_json, dict):
        return None
    built = build_json.get("built")
    if build_json.get("origin") != release.build.kind or not isinstance(built, dict):
        return None
    tag, image_id = built.get("tag"), built.get("image_id")
    if not isinstance(tag, str) or not isinstance(image_id, str):
        return None
    on = build_json.get("built_on")
    return pinned(release, tag, image_id, on if isinstance(on, str) else None)


def command_key(host: str, build: Build, revision: str | None) -> str:
    """What determines the image a build command makes: the host it runs on (its daemon
    keeps the image), the command with its folder and how the image is named, and the git
    revision of that folder. The release name and the cluster are not part of it: the recipe
    serves the triangle and the ring from one image (release thread, r6x post: "This produces
    vllm-ds41f-kkref:19f2c20ed4d6-r6x; copy it to every node"), and its `build image` refuses
    to build a tag that exists."""
    inputs = {
        "host": host,
        "build": build.model_dump(mode="json", exclude={"on", "image_id"}),
        "revision": revision,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:20]


def run_release(release: Release, build: ReleaseBuild) -> Release:
    """The release a run boots after its build stage: an image build pinned to the image made."""
    if isinstance(build, ImageBuild) and release.build.makes_image:
        return pinned(release, build.built.tag, build.built.image_id, build.built_on)
    return release


# -- I/O -----------------------------------------------------------------------------------------


def image_for(
    cluster: Cluster,
    release: Release,
    transports: Mapping[str, Transport],
    say: LineSink,
    state: Path | None = None,
) -> ImageBuild:
    """Run the release's build command if it has one, then adopt the image on the build node.

    A command already run on the same host with the same inputs (`command_key`) is not run
    again while its image is still there: `state/builds/made/KEY.json` names the image it made.
    """
    build = release.build
    node = build_node(cluster, build)
    endpoint = build_endpoint(cluster, release)
    started = time.monotonic()
    expected = build.image_id
    if build.kind == "command":
        key = command_key(cluster.node(node).address, build, _revision(transports[node], build))
        remembered = _remembered(state, key, endpoint, say)
        if remembered is not None:
            reference, expected = remembered.tag, remembered.image_id
        else:
            reference = _run_command(transports[node], build, say)
    elif build.image is not None:
        reference = build.image
    else:  # validation refuses this; kept for models built in code
        raise SpecError("an image build needs `image`", key="build.image")
    adopted = adopt(endpoint, reference, expected_id=expected)
    if build.kind == "command" and state is not None:
        _remember(state, key, adopted)
    seconds = time.monotonic() - started
    say(f"image {reference} on {node}: {adopted.image_id[:19]}")
    return ImageBuild(
        built=adopted.model_copy(update={"seconds": seconds}),
        base_image="",
        lock_digest="",
        seconds={"build": seconds},
        origin=build.kind,
        built_on=node,
    )


def adopt(endpoint: DockerEndpoint, reference: str, *, expected_id: str | None) -> BuiltImage:
    """The image `reference` on the endpoint's daemon; BuildError when absent or not the pin."""
    with closing(connect(endpoint)) as client:
        facts = inspect_facts(client, endpoint.node, reference)
    if facts is None:
        raise BuildError(
            f"no image {reference} on {endpoint.node}'s daemon: build, pull or load it there first"
        )
    if expected_id is not None and facts.image_id != expected_id:
        raise BuildError(
            f"image {reference} on {endpoint.node} is {facts.image_id}, but the release (or its "
            f"record) names {expected_id}: the tag was moved; sparkgate runs only the image that "
            "was qualified"
        )
    return BuiltImage(
        tag=reference, image_id=facts.image_id, source_digest="", reused=True, seconds=0.0
    )


def tag_in_time(node: str, pattern: str, output: str, seconds: float = MATCH_TIME_S) -> str | None:
    """`tag_from_output` in a child process that is killed after `seconds` (a `re` match cannot
    be interrupted in-process); BuildError naming the pattern when it runs out of time."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        pending = pool.apply_async(tag_from_output, (pattern, output[-MATCHED_TAIL:]))
        try:
            found: str | None = pending.get(timeout=seconds)
        except multiprocessing.TimeoutError as slow:
            raise BuildError(
                f"{node}: build.image_line /{pattern}/ took over {seconds:g} s on the build "
                "command's output (a pattern that backtracks without end): make it simpler"
            ) from slow
    return found


def _made_file(state: Path, key: str) -> Path:
    return state / "builds" / "made" / f"{key}.json"


def _remembered(
    state: Path | None, key: str, endpoint: DockerEndpoint, say: LineSink
) -> BuiltImage | None:
    """The image an earlier run of the same command made, if its daemon still holds it."""
    if state is None or not _made_file(state, key).is_file():
        return None
    known = BuiltImage.model_validate_json(_made_file(state, key).read_text())
    try:
        adopt(endpoint, known.tag, expected_id=known.image_id)
    except BuildError as gone:
        say(f"the image the build command made before is not usable ({gone}): building again")
        return None
    say(f"{known.tag} was made by the same build command on {endpoint.node}: not built again")
    return known


def _remember(state: Path, key: str, image: BuiltImage) -> None:
    path = _made_file(state, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, image.model_dump_json())


def _revision(transport: Transport, build: Build) -> str | None:
    """The git commit of the command's folder (None: no folder, or not a checkout)."""
    if build.cwd is None:
        return None
    found = transport.run(["git", "-C", build.cwd, "rev-parse", "HEAD"], timeout=30)
    return found.stdout.strip() if found.ok else None


def _run_command(transport: Transport, build: Build, say: LineSink) -> str:
    """Run the build command on the node; the image name it produced."""
    shown = shlex.join(build.command)
    say(f"{transport.node}: running the release's build command: {shown}")
    result = transport.run(build.command, cwd=build.cwd, timeout=build.timeout_s)
    output = result.stdout + result.stderr
    if not result.ok:
        tail = output.strip()[-OUTPUT_TAIL:] or "(no output)"
        raise BuildError(f"{transport.node}: `{shown}` exited {result.rc}: {tail}")
    say(f"{transport.node}: build command done in {result.duration:.0f} s")
    if build.image is not None:
        return build.image
    if build.image_file is not None:
        path = build.image_file
        if not path.startswith("/") and build.cwd is not None:
            path = f"{build.cwd.rstrip('/')}/{path}"
        found = tag_from_file(transport.read_text(path))
        where = f"file {path}"
    else:
        found = tag_in_time(transport.node, str(build.image_line), output)
        where = f"output (no line matches /{build.image_line}/)"
    if not found:
        raise BuildError(f"{transport.node}: `{shown}` named no image in its {where}")
    return found
