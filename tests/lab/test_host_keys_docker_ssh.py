"""Attack: an `ssh://` Docker daemon reached around the cluster's SSH settings. The SDK on its
own reads only ~/.ssh/config and the system known_hosts, so the cluster's known_hosts, key file
and port were ignored (a node reachable only on a custom port, with its own key, could not be
used, and its host key was checked against the wrong file). Now the docker connection uses the
cluster's settings, and its host key policy, like the SSH transport.

The host is a lab sshd namespace, reached through a relay on a port only the settings name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cluster.transport.docker_client import DockerEndpoint, connect
from flows.errors import HostKeyError, TransportError
from tests.support.lab import Lab

from .tcp_relay import Relay

pytestmark = pytest.mark.lab


def endpoint(lab: Lab, relay: Relay, known_hosts: Path, *, pin: bool) -> DockerEndpoint:
    settings = lab.settings(
        0, host="127.0.0.1", port=relay.port, known_hosts=known_hosts, accept_unknown_host_keys=pin
    )
    return DockerEndpoint(node="relayed", base_url="ssh://root@127.0.0.1", ssh=settings)


def reach(target: DockerEndpoint) -> str:
    """'' when the daemon answered, else why not (the lab hosts may run no daemon: then SSH
    itself got through and only `docker system dial-stdio` failed)."""
    try:
        connect(target, timeout=20).close()
    except HostKeyError:
        raise
    except TransportError as error:
        return str(error).lower()
    return ""


def test_docker_over_ssh_uses_the_cluster_known_hosts_key_and_port(
    lab: Lab,
    tmp_path: Path,
) -> None:
    host0, host1 = lab.state.hosts[0], lab.state.hosts[1]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    with Relay((host0.address, 22)) as relay:
        with pytest.raises(HostKeyError, match=r"unknown .*SHA256:"):
            connect(endpoint(lab, relay, known_hosts, pin=False), timeout=20)
        # pinned on first use, through the cluster's port and key file
        assert "authentication" not in reach(endpoint(lab, relay, known_hosts, pin=True))
        assert known_hosts.read_text().startswith(f"[127.0.0.1]:{relay.port} ")
        relay.target = (host1.address, 22)
        with pytest.raises(HostKeyError, match="CHANGED"):
            connect(endpoint(lab, relay, known_hosts, pin=True), timeout=20)
