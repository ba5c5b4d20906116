"""From a cluster spec to transports: one per node, shared, so each node has one connection.

The spec says how nodes are reached (`transport: {kind: local|ssh, ...}`); this module is the
only place that turns it into `LocalTransport` / `SshTransport` objects. A port left at its
default in the spec defers to `~/.ssh/config`, so an operator's Host entries keep working.
"""

from __future__ import annotations

import threading
from types import TracebackType

from flows.cluster.transport.base import Transport
from flows.cluster.transport.local import LocalTransport
from flows.cluster.transport.ssh import SshSettings, SshTransport
from flows.spec.cluster import Cluster, Node
from flows.spec.cluster import SshTransport as SshSpec


def ssh_settings(spec: SshSpec, node: Node) -> SshSettings:
    """SSH settings of one node: the node's port override, else an explicit spec port."""
    port = node.overrides.ssh_port or (spec.port if "port" in spec.model_fields_set else None)
    return SshSettings(
        host=node.address,
        port=port,
        user=spec.user,
        key_file=spec.key_file,
        known_hosts=spec.known_hosts,
        accept_unknown_host_keys=spec.accept_unknown_host_keys,
        connect_timeout_s=spec.connect_timeout_s,
        connect_attempts=spec.connect_retries + 1,
        command_timeout_s=spec.command_timeout_s,
    )


def docker_ssh(cluster: Cluster, node: Node) -> SshSettings | None:
    """How an `ssh://` docker daemon of the node is reached: the cluster's SSH settings (its
    known_hosts, key file, port, host key policy); None for a local cluster."""
    if cluster.transport.kind == "local":
        return None
    return ssh_settings(cluster.transport, node)


def transport_for(cluster: Cluster, node: Node) -> Transport:
    """A new transport to `node` (prefer `TransportPool` to share connections)."""
    if cluster.transport.kind == "local":
        return LocalTransport(node.name)
    return SshTransport(node.name, ssh_settings(cluster.transport, node))


class TransportPool:
    """One transport per node of a cluster, created on first use and closed together."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._transports: dict[str, Transport] = {}
        self._lock = threading.Lock()

    def node(self, name: str) -> Transport:
        """The transport to the node called `name` (KeyError if the cluster has none)."""
        with self._lock:
            if name not in self._transports:
                self._transports[name] = transport_for(self.cluster, self.cluster.node(name))
            return self._transports[name]

    @property
    def head(self) -> Transport:
        """The transport to the head node."""
        return self.node(self.cluster.head.name)

    def close(self) -> None:
        """Close every connection."""
        with self._lock:
            for transport in self._transports.values():
                transport.close()
            self._transports.clear()

    def __enter__(self) -> TransportPool:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
