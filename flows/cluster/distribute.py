"""Send the built image to every other node and prove they all hold the same image.

There is no registry between the nodes, so the image goes straight from the build node's daemon
to each other daemon: a streamed `docker save` piped into `docker load`, one thread per target,
chunk by chunk (an image never sits whole in memory). Afterwards every node's copy is inspected
and compared with the build node's: the same image ID, or, where a daemon's snapshotter reports a
different ID, the same RootFS layers and runtime config. A node whose tag already names a
different image is refused, never overwritten.
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

from flows.cluster.docker_client import DockerEndpoint, connect
from flows.cluster.image_progress import ImageProgress, NullProgress
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
    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        futures = {
            target.node: pool.submit(_send, source, target, tag, reference, observer)
            for target in targets
        }
        failures = [_failure(node, future.exception()) for node, future in futures.items()]
    problems = [failure for failure in failures if failure]
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


def _send(
    source: DockerEndpoint,
    target: DockerEndpoint,
    tag: str,
    reference: ImageFacts,
    progress: ImageProgress,
) -> None:
    """One save -> load stream, each thread with its own connections to both daemons."""
    with closing(connect(source)) as source_client, closing(connect(target)) as client:
        _load_unless_present(
            source_client, client, target.node, tag, reference=reference, progress=progress
        )


def _load_unless_present(
    source: docker.DockerClient,
    client: docker.DockerClient,
    node: str,
    tag: str,
    *,
    reference: ImageFacts,
    progress: ImageProgress,
) -> None:
    """Stream the image into client; a node that already has the same image is left alone."""
    existing = inspect_facts(client, node, tag)
    progress.transfer_start(node, 0 if existing else reference.size)
    if existing is not None:
        try:
            compare_facts(reference, existing)
        except BuildError as exc:
            progress.transfer_done(node, ok=False)
            raise BuildError(f"{exc}; its tag {tag} is never overwritten") from exc
        progress.transfer_done(node, ok=True)
        return
    ok = False
    try:
        saved = source.api.get_image(tag, chunk_size=CHUNK_BYTES)
        for status in client.api.load_image(_counted(saved, node, progress)):
            if "error" in status:
                raise BuildError(f"docker load: {status['error']}")
        ok = True
    finally:
        progress.transfer_done(node, ok=ok)


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
