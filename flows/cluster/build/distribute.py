"""Send the built image to every other node and prove they all hold the same image.

There is no registry between the nodes, so the image goes straight from the build node's daemon
to each other daemon: one streamed `docker save`, fanned out chunk by chunk to a `docker load`
per target, one thread each (the image is read once and never sits whole in memory). Then
every node's copy is inspected and compared with the build node's: the same image ID, or, where
a daemon's snapshotter reports a different ID, the same RootFS layers and runtime config. A node
whose tag already names a different image is refused, never overwritten.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from typing import Any, Literal

import docker
from docker.errors import DockerException, ImageNotFound
from pydantic import BaseModel, ConfigDict
from requests.exceptions import RequestException

from flows.cluster.build.fanout import Fanout
from flows.cluster.build.progress import ImageProgress, NullProgress
from flows.cluster.transport.docker_client import DockerEndpoint, connect
from flows.errors import BuildError, SparkgateError

CHUNK_BYTES = 1 << 20
# The parts of `docker image inspect` that decide what a container runs.
_CONFIG_KEYS = ("Entrypoint", "Cmd", "Env", "User", "WorkingDir", "Labels", "ExposedPorts")


class ImageFacts(BaseModel):
    """What identifies an image on one node, from `docker image inspect`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    image_id: str
    layers: tuple[str, ...]
    config_digest: str
    size: int


class NodeImage(BaseModel):
    """One node's verified copy: its facts and how it matched the build node's image."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    facts: ImageFacts
    match: Literal["same-id", "same-content"]


def image_facts(node: str, inspect: Mapping[str, Any]) -> ImageFacts:
    """Facts from an inspect document (pure, so the comparison can be tested without a daemon)."""
    config = inspect.get("Config") or {}
    runtime = {key: config.get(key) for key in _CONFIG_KEYS}
    runtime |= {"Architecture": inspect.get("Architecture"), "Os": inspect.get("Os")}
    canonical = json.dumps(runtime, sort_keys=True).encode()
    return ImageFacts(
        node=node,
        image_id=str(inspect["Id"]),
        layers=tuple((inspect.get("RootFS") or {}).get("Layers") or ()),
        config_digest="sha256:" + hashlib.sha256(canonical).hexdigest(),
        size=int(inspect.get("Size") or 0),
    )


def compare_facts(reference: ImageFacts, other: ImageFacts) -> Literal["same-id", "same-content"]:
    """How other matches reference; BuildError naming both nodes when it does not."""
    if other.image_id == reference.image_id:
        return "same-id"
    if other.layers == reference.layers and other.config_digest == reference.config_digest:
        return "same-content"
    raise BuildError(
        f"node {other.node} holds image {other.image_id[:19]} with different "
        f"{'layers' if other.layers != reference.layers else 'config'} than "
        f"{reference.image_id[:19]} on build node {reference.node}"
    )


def inspect_facts(client: docker.DockerClient, node: str, tag: str) -> ImageFacts | None:
    """The facts of tag on a node's daemon, or None when the node does not have it."""
    try:
        return image_facts(node, client.api.inspect_image(tag))
    except ImageNotFound:
        return None


def distribute_image(
    source: DockerEndpoint,
    targets: Sequence[DockerEndpoint],
    tag: str,
    progress: ImageProgress | None = None,
) -> list[NodeImage]:
    """Load tag from source into every target in parallel, then verify all; returns per node."""
    observer = progress or NullProgress()
    with closing(connect(source)) as source_client:
        reference = inspect_facts(source_client, source.node, tag)
    if reference is None:
        raise BuildError(f"build node {source.node} has no image {tag} to distribute")
    problems: list[str] = []
    needed: list[DockerEndpoint] = []
    for target in targets:
        try:
            if not _already_there(target, tag, reference, observer):
                needed.append(target)
        except (SparkgateError, DockerException, RequestException) as exc:
            problems.append(f"node {target.node}: {exc}")
    fanout = Fanout([target.node for target in needed])
    with ThreadPoolExecutor(max_workers=len(needed) + 1) as pool:
        loads = {
            target.node: pool.submit(_load, target, tag, fanout, reference.size, observer)
            for target in needed
        }
        if needed:
            pool.submit(_save, source, tag, fanout)
        problems += [_failure(node, future.exception()) for node, future in loads.items()]
    problems = [problem for problem in problems if problem]
    if problems:
        raise BuildError("distribution failed:\n" + "\n".join(problems))
    return verify_image([source, *targets], tag, reference)


def verify_image(
    endpoints: Sequence[DockerEndpoint], tag: str, reference: ImageFacts
) -> list[NodeImage]:
    """Check every endpoint holds tag as the reference image; BuildError lists those that do not."""
    verified: list[NodeImage] = []
    problems: list[str] = []
    for endpoint in endpoints:
        with closing(connect(endpoint)) as client:
            facts = inspect_facts(client, endpoint.node, tag)
        if facts is None:
            problems.append(f"node {endpoint.node}: no image {tag}")
            continue
        try:
            verified.append(NodeImage(facts=facts, match=compare_facts(reference, facts)))
        except BuildError as exc:
            problems.append(str(exc))
    if problems:
        raise BuildError(f"image {tag} differs across nodes:\n" + "\n".join(problems))
    return verified


def _already_there(
    target: DockerEndpoint, tag: str, reference: ImageFacts, progress: ImageProgress
) -> bool:
    """True when target holds the same image; BuildError when its tag names another one."""
    with closing(connect(target)) as client:
        existing = inspect_facts(client, target.node, tag)
    if existing is None:
        return False
    progress.transfer_start(target.node, 0)
    try:
        compare_facts(reference, existing)
    except BuildError as exc:
        progress.transfer_done(target.node, ok=False)
        raise BuildError(f"{exc}; its tag {tag} is never overwritten") from exc
    progress.transfer_done(target.node, ok=True)
    return True


def _save(source: DockerEndpoint, tag: str, fanout: Fanout) -> None:
    """Read `docker save` from the build node once, into every reader of the fanout."""
    with closing(connect(source)) as client:
        fanout.pump(client.api.get_image(tag, chunk_size=CHUNK_BYTES))


def _load(
    target: DockerEndpoint, tag: str, fanout: Fanout, size: int, progress: ImageProgress
) -> None:
    """Feed this node's copy of the stream into its `docker load`; drop out on any failure."""
    progress.transfer_start(target.node, size)
    ok = False
    try:
        with closing(connect(target)) as client:
            chunks = _counted(fanout.reader(target.node), target.node, progress)
            for status in client.api.load_image(chunks):
                if "error" in status:
                    raise BuildError(f"docker load of {tag}: {status['error']}")
        ok = True
    finally:
        if not ok:
            fanout.drop(target.node)
        progress.transfer_done(target.node, ok=ok)


def _counted(chunks: Iterator[bytes], node: str, progress: ImageProgress) -> Iterator[bytes]:
    for chunk in chunks:
        progress.transfer_advance(node, len(chunk))
        yield chunk


def _failure(node: str, error: BaseException | None) -> str:
    if error is None:
        return ""
    if isinstance(error, SparkgateError | DockerException | RequestException | OSError):
        return f"node {node}: {error}"
    raise error
