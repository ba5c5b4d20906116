"""Attack: a host key swapped under `accept_unknown_host_keys`. The setting never recorded or
pinned a key: one transport accepted two different keys for one host:port and known_hosts stayed
empty. Now the first key is pinned in known_hosts, and a later, different key for that host:port
is refused as CHANGED, by the same transport, a new one, and every later run.

The hosts are the lab's real sshd namespaces; a relay on one local port first reaches host 0,
then host 1 (another key), as a man in the middle would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cluster.transport import SshTransport
from flows.errors import HostKeyError
from tests.support.lab import Lab

from .tcp_relay import Relay

pytestmark = pytest.mark.lab


def through(lab: Lab, relay: Relay, known_hosts: Path) -> SshTransport:
    settings = lab.settings(
        0, host="127.0.0.1", port=relay.port, known_hosts=known_hosts,
        accept_unknown_host_keys=True,
    )  # fmt: skip
    return SshTransport("relayed", settings)


def test_first_key_is_pinned_and_a_different_one_refused(lab: Lab, tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    host0, host1 = lab.state.hosts[0], lab.state.hosts[1]
    with Relay((host0.address, 22)) as relay:
        transport = through(lab, relay, known_hosts)
        try:
            assert host0.address in transport.run(["ip", "-4", "-o", "addr"], check=True).stdout
            pinned = known_hosts.read_text()
            assert pinned.startswith(f"[127.0.0.1]:{relay.port} ssh-ed25519 ")
            transport.close()
            relay.target = (host1.address, 22)  # same host:port, another host key
            with pytest.raises(HostKeyError, match="CHANGED"):
                transport.run(["true"])
            later = through(lab, relay, known_hosts)  # a later run, a new transport
            with pytest.raises(HostKeyError, match="CHANGED"):
                later.run(["true"])
            later.close()
            assert known_hosts.read_text() == pinned  # the second key was never recorded
            relay.target = (host0.address, 22)
            assert transport.run(["true"]).ok  # the pinned key is still accepted
        finally:
            transport.close()
