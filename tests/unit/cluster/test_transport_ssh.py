"""SSH settings: explicit cluster values win over ~/.ssh/config, which wins over defaults."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import paramiko
import pytest

from flows.cluster.transport.factory import TransportPool, ssh_settings, transport_for
from flows.cluster.transport.local import LocalTransport
from flows.cluster.transport.ssh import SshSettings, SshTransport, fingerprint, resolve_target
from flows.spec.cluster import Cluster
from flows.spec.load import load_model

ENGINE = Path(__file__).resolve().parents[3] / "config" / "engines" / "sparkengine.yaml"

CONFIG = """Host spark-*
    User ops
    Port 2222
    IdentityFile ~/.ssh/spark_ed25519
    UserKnownHostsFile /etc/sparkgate/known_hosts
Host spark-a
    HostName 10.0.0.11
"""


def parsed() -> paramiko.SSHConfig:
    return paramiko.SSHConfig.from_text(CONFIG)


def test_ssh_config_fills_what_the_cluster_leaves_open() -> None:
    target = resolve_target(SshSettings(host="spark-a"), parsed())
    assert target.hostname == "10.0.0.11"
    assert (target.port, target.user) == (2222, "ops")
    assert target.key_files == (Path("~/.ssh/spark_ed25519").expanduser(),)
    assert target.known_hosts == Path("/etc/sparkgate/known_hosts")


def test_explicit_settings_win(tmp_path: Path) -> None:
    settings = SshSettings(
        host="spark-a",
        port=22,
        user="root",
        key_file=tmp_path / "k",
        known_hosts=tmp_path / "kh",
    )
    target = resolve_target(settings, parsed())
    assert (target.hostname, target.port, target.user) == ("10.0.0.11", 22, "root")
    assert target.key_files == (tmp_path / "k",)
    assert target.known_hosts == tmp_path / "kh"


def test_defaults_without_config() -> None:
    target = resolve_target(SshSettings(host="10.1.2.3"), None)
    assert (target.hostname, target.port, target.user, target.key_files) == (
        "10.1.2.3",
        22,
        None,
        (),
    )
    assert target.known_hosts == Path("~/.ssh/known_hosts").expanduser()


def test_transport_reads_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(CONFIG)
    transport = SshTransport("a", SshSettings(host="spark-a", ssh_config=path))
    assert transport.target.hostname == "10.0.0.11"
    missing = SshTransport("a", SshSettings(host="spark-a", ssh_config=tmp_path / "none"))
    assert missing.target.hostname == "spark-a"


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
def test_fingerprint_matches_ssh_keygen(tmp_path: Path) -> None:
    path = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    listed = subprocess.run(
        ["ssh-keygen", "-lf", f"{path}.pub"], capture_output=True, text=True, check=True
    )
    key = paramiko.Ed25519Key.from_private_key_file(str(path))
    assert fingerprint(key) == listed.stdout.split()[1]


def cluster(tmp_path: Path, transport: str) -> Cluster:
    path = tmp_path / "c.yaml"
    path.write_text(
        f"""kind: cluster
name: t
shape: tp2-x
transport: {transport}
runtime: {{kind: process}}
engine: {{extends: {ENGINE}}}
nodes:
  - {{name: a, rank: 0, head: true, address: spark-a, workdir: /w}}
  - {{name: b, rank: 1, address: spark-b, workdir: /w, overrides: {{ssh_port: 2200}}}}
"""
    )
    return load_model(path, Cluster)


def test_spec_to_settings(tmp_path: Path) -> None:
    spec = cluster(tmp_path, "{kind: ssh, user: ops, connect_retries: 2, command_timeout_s: 9}")
    assert spec.transport.kind == "ssh"
    a = ssh_settings(spec.transport, spec.nodes[0])
    b = ssh_settings(spec.transport, spec.nodes[1])
    assert a.port is None  # left open: ~/.ssh/config (or 22) decides
    assert b.port == 2200
    assert (a.user, a.connect_attempts, a.command_timeout_s) == ("ops", 3, 9)
    assert a.accept_unknown_host_keys is False
    explicit = cluster(tmp_path, "{kind: ssh, user: ops, port: 22}")
    assert explicit.transport.kind == "ssh"
    assert ssh_settings(explicit.transport, explicit.nodes[0]).port == 22


def test_pool_shares_one_transport_per_node(tmp_path: Path) -> None:
    spec = cluster(tmp_path, "{kind: local}")
    assert isinstance(transport_for(spec, spec.nodes[0]), LocalTransport)
    with TransportPool(spec) as pool:
        assert pool.head is pool.node("a")
        assert pool.node("b") is not pool.node("a")
        assert pool.node("b").node == "b"
        with pytest.raises(KeyError):
            pool.node("c")
