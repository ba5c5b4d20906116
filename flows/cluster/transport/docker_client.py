"""How the pipeline reaches one node's Docker daemon: a named endpoint and a client for it.

Nodes expose their daemon as a local unix socket (this machine, lab hosts) or over SSH
(`ssh://user@host`, GB10 nodes); the docker SDK speaks both, so everything above this module
only handles endpoints.
"""

from __future__ import annotations

import docker
from docker.errors import DockerException
from pydantic import BaseModel, ConfigDict
from requests.exceptions import RequestException

from flows.errors import TransportError

CLIENT_TIMEOUT_S = 600


class DockerEndpoint(BaseModel):
    """A node's name and its daemon's address (`unix:///path` or `ssh://user@host`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    base_url: str


def connect(endpoint: DockerEndpoint, timeout: int = CLIENT_TIMEOUT_S) -> docker.DockerClient:
    """A client for the endpoint's daemon; TransportError naming the node when it is unreachable."""
    try:
        client = docker.DockerClient(base_url=endpoint.base_url, timeout=timeout)
        client.ping()
    except (DockerException, RequestException) as exc:
        raise TransportError(
            f"node {endpoint.node}: docker daemon at {endpoint.base_url} unreachable: {exc}"
        ) from exc
    return client
