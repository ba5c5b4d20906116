"""The cluster lock and preflight over SSH, on the lab cluster file written by `lab up`."""

from __future__ import annotations

import pytest

from flows.cluster.ops.lock import ClusterLock, lock_settings, read_lock
from flows.cluster.ops.preflight import run_preflight
from flows.cluster.transport.factory import TransportPool, transport_for
from flows.errors import LockHeldError
from tests.support.lab import Lab

pytestmark = pytest.mark.lab


@pytest.mark.slow
def test_lock_contention_over_ssh(lab: Lab) -> None:
    settings = lock_settings(lab.cluster)
    head = lab.cluster.head
    first, second = transport_for(lab.cluster, head), transport_for(lab.cluster, head)
    try:
        with ClusterLock(first, settings, command="sparkgate qualify releases/r2.yaml"):
            with pytest.raises(LockHeldError, match=r"locked by .*qualify releases/r2\.yaml"):
                ClusterLock(second, settings, command="sparkgate cluster start").acquire()
            record = read_lock(second, settings.path)
            assert record is not None
            assert record.command == "sparkgate qualify releases/r2.yaml"
        assert read_lock(second, settings.path) is None
        with ClusterLock(second, settings, command="next run") as taken:
            assert taken.command == "next run"
    finally:
        first.close()
        second.close()


@pytest.mark.slow
def test_doctor_over_ssh_and_with_a_cut_link(lab: Lab) -> None:
    with TransportPool(lab.cluster) as pool:
        report = run_preflight(lab.cluster, lambda node: pool.node(node.name))
        lines = {f"{r.node}/{r.check}": r.status for r in report.results}
        for host in lab.state.hosts:
            assert lines[f"{host.name}/reachable"] == "OK"
            assert lines[f"{host.name}/python version"] == "OK"
            assert lines[f"{host.name}/clock"] == "OK"
        assert lines["sg-t-0/port 8000"] == "OK"
        assert report.ok
    with lab.cut(1), TransportPool(lab.cluster) as pool:
        report = run_preflight(lab.cluster, lambda node: pool.node(node.name))
    assert [(e.node, e.check) for e in report.errors] == [("sg-t-1", "reachable")]
    assert "cannot reach" in report.errors[0].detail
