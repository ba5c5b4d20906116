"""The shared test helpers: a wait that says what it waited for, overlays that load."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release
from tests.support.net import LOWEST, ephemeral_start, free_port
from tests.support.overlays import cluster_overlay, release_overlay
from tests.support.waiting import WaitTimeoutError, wait_until


def test_wait_until_returns_the_first_truthy_value() -> None:
    values = iter([None, 0, "ready"])
    assert wait_until(lambda: next(values), 5, "a value", interval_s=0) == "ready"


def test_wait_until_names_what_it_waited_for() -> None:
    expected = r"timed out after 0\.1 s waiting for the moon:\nlog"
    with pytest.raises(WaitTimeoutError, match=expected):
        wait_until(lambda: False, 0.1, "the moon", interval_s=0.02, detail=lambda: "log")


def test_overlays_load_as_the_shipped_kinds(tmp_path: Path) -> None:
    cluster = load_model(cluster_overlay(tmp_path / "c.yaml", "t", tmp_path), Cluster)
    assert [node.name for node in cluster.nodes] == ["t0", "t1"]
    assert cluster.ports.api != cluster.ports.rendezvous
    release = load_model(release_overlay(tmp_path / "r1.yaml", model={"size": "tiny"}), Release)
    assert release.name == "r1"
    assert release.model.size == "tiny"


def test_free_ports_lie_below_the_ephemeral_range_and_are_never_given_twice() -> None:
    """Outgoing connections draw local ports from the ephemeral range; ours stay out of it."""
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(LOWEST <= port < ephemeral_start() for port in ports)
    with socket.socket() as server:  # and each is free to bind
        server.bind(("127.0.0.1", ports[-1]))
