"""How the pipeline reaches one node's Docker daemon: a named endpoint and a client for it.

Nodes expose their daemon as a local unix socket (this machine, lab hosts) or over SSH
(`ssh://user@host`, GB10 nodes); the docker SDK speaks both, so everything above this module
only handles endpoints. Over SSH the SDK on its own reads only `~/.ssh/config` and the system
known_hosts; here the connection uses the cluster's SSH settings instead (known_hosts, key file,
port, user, and `accept_unknown_host_keys` pinning), exactly as the SSH transport does.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import docker
import paramiko
from docker.constants import DEFAULT_DOCKER_API_VERSION
from docker.errors import DockerException
from docker.transport import SSHHTTPAdapter
from pydantic import BaseModel, ConfigDict
from requests.exceptions import RequestException

from flows.cluster.transport.ssh import (
    SshSettings,
    SshTarget,
    host_key_changed,
    host_key_policy,
    load_ssh_config,
    resolve_target,
)
from flows.errors import HostKeyError, TransportError

CLIENT_TIMEOUT_S = 600
_SSH_MOUNT = "http+docker://ssh"


class DockerEndpoint(BaseModel):
    """A node's name, its daemon's address (`unix:///path` or `ssh://user@host`) and, for ssh,
    how the cluster reaches that node (None: ~/.ssh/config and the defaults)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    base_url: str
    ssh: SshSettings | None = None


def connect(endpoint: DockerEndpoint, timeout: int = CLIENT_TIMEOUT_S) -> docker.DockerClient:
    """A client for the endpoint's daemon; TransportError naming the node when it is unreachable,
    HostKeyError when its SSH host key is unknown (and not to be pinned) or changed."""
    try:
        if endpoint.base_url.startswith("ssh://"):
            client = _ssh_client(endpoint, timeout)
        else:
            client = docker.DockerClient(base_url=endpoint.base_url, timeout=timeout)
        client.ping()
    except (DockerException, RequestException, paramiko.SSHException, OSError) as exc:
        raise TransportError(
            f"node {endpoint.node}: docker daemon at {endpoint.base_url} unreachable: {exc}"
        ) from exc
    return client


def ssh_settings_of(endpoint: DockerEndpoint) -> SshSettings:
    """The endpoint's SSH settings; user and port in the URL fill what the settings leave open."""
    url = urllib.parse.urlparse(endpoint.base_url)
    base = endpoint.ssh or SshSettings(host=url.hostname or "")
    return base.model_copy(
        update={
            "host": url.hostname or base.host,
            "user": base.user or url.username,
            "port": base.port or url.port,
        }
    )


class _ClusterSshAdapter(SSHHTTPAdapter):  # type: ignore[misc]
    """The SDK's SSH adapter, connecting with the cluster's settings and host key policy."""

    def __init__(self, base_url: str, node: str, settings: SshSettings, timeout: int) -> None:
        self._node = node
        self._settings = settings
        self._target: SshTarget = resolve_target(settings, load_ssh_config(settings.ssh_config))
        super().__init__(base_url, timeout=timeout)

    def _create_paramiko_client(self, base_url: str) -> None:  # noqa: ARG002 - SDK signature
        target = self._target
        self.ssh_client = paramiko.SSHClient()
        if target.known_hosts.is_file():
            self.ssh_client.load_host_keys(str(target.known_hosts))
        self.ssh_client.set_missing_host_key_policy(
            host_key_policy(self._node, target, pin=self._settings.accept_unknown_host_keys)
        )
        keys = [str(path) for path in target.key_files]
        self.ssh_params: dict[str, Any] = {
            "hostname": target.hostname,
            "port": target.port,
            "username": target.user,
            "key_filename": keys or None,
            "look_for_keys": not keys,
            "allow_agent": True,
            "timeout": self._settings.connect_timeout_s,
            "banner_timeout": self._settings.connect_timeout_s,
            "auth_timeout": self._settings.connect_timeout_s,
        }

    def _connect(self) -> None:
        try:
            self.ssh_client.connect(**self.ssh_params)
        except paramiko.BadHostKeyException as error:
            self.ssh_client.close()
            raise host_key_changed(self._node, self._target, error) from error
        except HostKeyError:
            self.ssh_client.close()
            raise


def _ssh_client(endpoint: DockerEndpoint, timeout: int) -> docker.DockerClient:
    """A DockerClient whose ssh:// connection is made by `_ClusterSshAdapter`."""
    adapter = _ClusterSshAdapter(
        endpoint.base_url, endpoint.node, ssh_settings_of(endpoint), timeout
    )
    # a client on a placeholder address (nothing is contacted: the version is given), then
    # pointed at our adapter the way the SDK points itself at its own
    client = docker.DockerClient(
        base_url="tcp://127.0.0.1:9", version=DEFAULT_DOCKER_API_VERSION, timeout=timeout
    )
    api = client.api
    api._custom_adapter = adapter  # the SDK's own attribute for it
    api.mount(_SSH_MOUNT, adapter)
    api.base_url = _SSH_MOUNT
    api._version = api._retrieve_server_version()  # as `version="auto"` does
    return client
