"""Preflight: parsing and rules are pure and exact; collection works through a real transport."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.cluster.ops.preflight import (
    GIB,
    CustomOutcome,
    NodeFacts,
    Thresholds,
    evaluate,
    parse_df_available,
    parse_listening_ports,
    parse_meminfo_available,
    parse_python_version,
    read_host_facts,
    run_preflight,
    thresholds_for,
)
from flows.cluster.transport import LocalTransport
from flows.errors import ClusterError
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from tests.support.net import free_port
from tests.support.overlays import overlay

ENGINE = Path(__file__).resolve().parents[3] / "config" / "engines" / "sparkengine.yaml"
ROOT_CONFIG = Path(__file__).resolve().parents[3] / "config"

DF = """Filesystem     1024-blocks      Used Available Capacity Mounted on
overlay          102400000  20000000  82400000      20% /
"""
TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 1 1
   1: 0100007F:A3E2 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  0 0 2 1
   0: 00000000000000000000000001000000:7331 00000000000000000000000000000000:0000 0A 0
"""


def test_parsers() -> None:
    assert parse_df_available(DF) == 82400000 * 1024
    assert parse_meminfo_available("MemTotal: 10 kB\nMemAvailable:  2048 kB\n") == 2048 * 1024
    assert parse_listening_ports(TCP) == {0x1F90, 0x7331}
    assert parse_python_version("Python 3.11.7\n") == (3, 11, 7)
    with pytest.raises(ValueError, match="not a Python version"):
        parse_python_version("bash: python3: command not found")


def facts(**changes: object) -> NodeFacts:
    base: dict[str, object] = {
        "node": "n0",
        "head": True,
        "reachable": True,
        "disk_free": {"/work": 50 * GIB},
        "memory_available": 16 * GIB,
        "ports_in_use": {8000: False},
        "python_version": "Python 3.12.1",
        "clock_offset_s": 0.01,
        "clock_uncertainty_s": 0.01,
    }
    return NodeFacts.model_validate(base | changes)


def statuses(node_facts: list[NodeFacts]) -> dict[str, str]:
    report = evaluate("c", node_facts, Thresholds())
    return {f"{r.node}/{r.check}": r.status for r in report.results}


def test_healthy_node_is_all_ok() -> None:
    report = evaluate("c", [facts()], Thresholds())
    assert report.ok
    assert {r.status for r in report.results} == {"OK"}
    report.raise_for_errors()


@pytest.mark.parametrize(
    ("changes", "check", "status"),
    [
        ({"disk_free": {"/work": 5 * GIB}}, "n0/disk /work", "WARN"),
        ({"disk_free": {"/work": GIB // 2}}, "n0/disk /work", "ERROR"),
        ({"disk_free": {"/work": None}}, "n0/disk /work", "ERROR"),
        ({"memory_available": 2 * GIB}, "n0/memory", "WARN"),
        ({"memory_available": GIB // 4}, "n0/memory", "ERROR"),
        ({"ports_in_use": {8000: True}}, "n0/port 8000", "ERROR"),
        ({"python_version": "Python 3.10.12"}, "n0/python version", "ERROR"),
        ({"python_version": None, "python_error": "not found"}, "n0/python version", "ERROR"),
        ({"docker_error": "unreachable"}, "n0/docker daemon", "ERROR"),
        ({"docker_version": "26.1.5"}, "n0/docker daemon", "OK"),
        ({"clock_offset_s": 2.0}, "n0/clock", "WARN"),
        ({"clock_offset_s": -9.0}, "n0/clock", "ERROR"),
        ({"clock_offset_s": 0.5, "clock_uncertainty_s": 0.2}, "n0/clock", "OK"),
    ],
)
def test_rules(changes: dict[str, object], check: str, status: str) -> None:
    assert statuses([facts(**changes)])[check] == status


def test_unreachable_and_host_key_are_single_errors() -> None:
    lines = statuses(
        [
            NodeFacts(node="a", reachable=False, unreachable_reason="timed out"),
            NodeFacts(node="b", reachable=False, unreachable_reason="key", host_key_problem=True),
        ]
    )
    assert lines == {"a/reachable": "ERROR", "b/host key": "ERROR"}


def custom(**changes: object) -> CustomOutcome:
    base: dict[str, object] = {
        "name": "page size",
        "severity": "ERROR",
        "expect": r"^4096$",
        "rc": 0,
        "output": "4096\n",
    }
    return CustomOutcome.model_validate(base | changes)


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        (custom(), "OK"),
        (custom(output="65536\n"), "ERROR"),
        (custom(output="65536\n", severity="WARN"), "WARN"),
        (custom(rc=1), "ERROR"),
        (custom(rc=None, error="timed out"), "ERROR"),
    ],
)
def test_declared_checks(outcome: CustomOutcome, status: str) -> None:
    report = evaluate("c", [facts(custom=[outcome])], Thresholds())
    assert statuses([facts(custom=[outcome])])["n0/page size"] == status
    assert report.ok is (status != "ERROR")


def test_warnings_never_fail_but_errors_do() -> None:
    warned = evaluate("c", [facts(memory_available=2 * GIB)], Thresholds())
    assert warned.ok
    failed = evaluate("c", [facts(ports_in_use={8000: True})], Thresholds())
    with pytest.raises(ClusterError, match="n0: port 8000: in use"):
        failed.raise_for_errors()


def write_cluster(tmp_path: Path, *, port: int, workdir: str, checks: str) -> Cluster:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        f"""kind: cluster
name: pf
shape: tp2-local
transport: {{kind: local}}
runtime: {{kind: process}}
ports: {{api: {port}, rendezvous: 1}}
preflight:
{checks}
engine: {{extends: {ENGINE}}}
nodes:
  - {{name: a, rank: 0, head: true, address: 127.0.0.1, workdir: '{workdir}'}}
  - {{name: b, rank: 1, address: 127.0.0.1, workdir: '{workdir}'}}
"""
    )
    return load_model(path, Cluster)


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_collect_over_local_transport(tmp_path: Path, listening_port: int) -> None:
    canary = tmp_path / "pwned"
    workdir = str(tmp_path / f"w; touch {canary}")
    cluster = write_cluster(
        tmp_path,
        port=listening_port,
        workdir=workdir,
        checks=f"""  - {{name: node name, argv: [echo, '{{node}}'], expect: '^[ab]$'}}
  - {{name: never, argv: [echo, '$(touch {canary})'], expect: nomatch, severity: WARN}}
  - {{name: needs model, argv: [echo, '{{model}}'], severity: WARN}}""",
    )
    report = run_preflight(cluster, lambda node: LocalTransport(node.name))
    lines = {f"{r.node}/{r.check}": r for r in report.results}
    assert lines[f"a/disk {workdir}"].status == "OK"  # nearest existing parent measured
    assert lines[f"a/port {listening_port}"].status == "ERROR"
    assert "b/port 1" not in lines  # ports are checked on the head only
    assert lines["a/python version"].status == "OK"
    assert lines["a/node name"].status == "OK"
    assert lines["b/node name"].status == "OK"
    assert lines["a/never"].status == "WARN"
    assert "cannot fill" in lines["a/needs model"].detail
    assert lines["b/clock"].status == "OK"
    assert [e.check for e in report.errors] == [f"port {listening_port}"]
    assert not canary.exists()


def test_flock_is_checked_on_the_head_only() -> None:
    missing = evaluate("c", [facts(flock_missing=True)], Thresholds())
    (line,) = [r for r in missing.results if r.check == "flock"]
    assert (line.node, line.status) == ("n0", "ERROR")
    assert "flock is missing" in line.detail
    present = statuses([facts(flock_missing=False), facts(node="n1", head=False)])
    assert present["n0/flock"] == "OK"
    assert "n1/flock" not in present


def test_preflight_finds_flock_on_the_local_head(tmp_path: Path) -> None:
    cluster = load_model(ROOT_CONFIG / "local.yaml", Cluster)
    nodes = [n.model_copy(update={"workdir": str(tmp_path / n.name)}) for n in cluster.nodes]
    cluster = cluster.model_copy(update={"nodes": nodes})
    report = run_preflight(cluster, lambda node: LocalTransport(node.name))
    assert [(r.node, r.status) for r in report.results if r.check == "flock"] == [
        (cluster.head.name, "OK")
    ]
    # the local cluster's host facts (docs/host-probes.md) hold on this kind of machine
    for fact in ("page size", "kernel"):
        assert {(r.node, r.status) for r in report.results if r.check == fact} == {
            (node.name, "OK") for node in cluster.nodes
        }


def test_the_engine_profile_sets_the_memory_floor_of_a_boot() -> None:
    """The recipe's ranks may use 112 GiB (`--memory=112g`): a node with less is refused."""
    ring = load_model(ROOT_CONFIG / "examples" / "tp4-ring.yaml", Cluster)
    assert ring.engine.min_free_memory_gib == 112
    limits = thresholds_for(ring)
    short = evaluate("ring", [facts(memory_available=100 * GIB)], limits)
    with pytest.raises(ClusterError, match=r"n0: memory: 100.0 GiB available \(needs 112 GiB\)"):
        short.raise_for_errors()
    assert evaluate("ring", [facts(memory_available=119 * GIB)], limits).ok
    local = load_model(ROOT_CONFIG / "local.yaml", Cluster)
    assert thresholds_for(local) == Thresholds()  # the bundled engine names no floor


def _apst_nodes(tmp_path: Path) -> list[dict[str, object]]:
    """Two local nodes whose workdirs hold a sysfs-like APST timeout file: 2000 on n0, 100 on
    n1 (a host setting that differs on one node)."""
    nodes: list[dict[str, object]] = []
    for index, value in enumerate(("2000", "100")):
        workdir = tmp_path / f"n{index}"
        workdir.mkdir()
        (workdir / "apst_primary_timeout_ms").write_text(value + "\n")
        nodes.append({"name": f"n{index}", "rank": index, "head": index == 0,
                      "address": "127.0.0.1", "workdir": str(workdir)})  # fmt: skip
    return nodes


def test_a_host_fact_unlike_its_expectation_stops_preflight_naming_node_fact_values(
    tmp_path: Path,
) -> None:
    """A sysfs-like file in each node's workdir stands for a host setting (the recipe's APST
    timeout); on one node it differs, and preflight stops with that node, fact and both values."""
    nodes = _apst_nodes(tmp_path)
    fact = {"name": "apst primary timeout", "argv": ["cat", "{workdir}/apst_primary_timeout_ms"],
            "parse": "number", "at_least": 2000}  # fmt: skip
    text = {"name": "apst as text", "argv": ["cat", "{workdir}/apst_primary_timeout_ms"],
            "expect": "2000", "severity": "WARN"}  # fmt: skip
    ports = {"api": free_port(), "rendezvous": free_port()}  # another run may hold the shipped
    path = overlay(tmp_path / "cluster.yaml", "config/local.yaml", nodes=nodes, ports=ports,
                   probes={"facts": [fact, text]})  # fmt: skip
    cluster = load_model(path, Cluster)
    report = run_preflight(cluster, lambda node: LocalTransport(node.name))
    lines = {(r.node, r.check): (r.status, r.detail) for r in report.results}
    assert lines["n0", "apst primary timeout"] == ("OK", "2000")
    assert lines["n1", "apst primary timeout"] == ("ERROR", "is 100, expected at least 2000")
    assert lines["n1", "apst as text"] == ("WARN", "is '100', expected '2000'")
    with pytest.raises(ClusterError) as stopped:
        report.raise_for_errors()
    assert str(stopped.value) == (
        "preflight of local failed: n1: apst primary timeout: is 100, expected at least 2000"
    ), "only the fact fails (unless a free port was taken in between)"


def test_a_node_below_its_startup_memory_guard_fails_preflight() -> None:
    """The recipe's memguard refuses a start below 5 GiB: preflight says so before a boot."""
    triangle = load_model(ROOT_CONFIG / "examples" / "tp3-triangle.yaml", Cluster)
    engine = triangle.engine.model_copy(update={"min_free_memory_gib": None})
    guarded = triangle.model_copy(update={"engine": engine})
    limits = thresholds_for(guarded)
    assert limits.memory_error_gib == 5
    short = evaluate("triangle", [facts(memory_available=4 * GIB)], limits)
    with pytest.raises(ClusterError, match=r"n0: memory: 4.0 GiB available \(needs 5 GiB\)"):
        short.raise_for_errors()


def test_preflight_keeps_each_nodes_host_facts_and_they_can_be_read_alone(tmp_path: Path) -> None:
    """A record keeps the facts preflight read (host-facts.json), and `bench run -c` reads them
    alone on a serving cluster: the values by node and fact, a fact that cannot be read with why."""
    nodes = _apst_nodes(tmp_path)
    facts = [
        {"name": "apst", "argv": ["cat", "{workdir}/apst_primary_timeout_ms"], "parse": "number",
         "at_least": 0},
        {"name": "kernel", "argv": ["uname", "-r"], "pattern": "."},
        {"name": "memory-saver", "argv": ["cat", "{workdir}/no-such-file"], "pattern": ".",
         "severity": "WARN"},
    ]  # fmt: skip
    ports = {"api": free_port(), "rendezvous": free_port()}
    path = overlay(tmp_path / "cluster.yaml", "config/local.yaml", nodes=nodes, ports=ports,
                   probes={"facts": facts})  # fmt: skip
    cluster = load_model(path, Cluster)
    report = run_preflight(cluster, lambda node: LocalTransport(node.name))
    alone = read_host_facts(cluster, lambda node: LocalTransport(node.name))
    for values, errors in ((report.host_facts, report.host_fact_errors), alone):
        assert values["n0"]["apst"] == 2000.0
        assert values["n1"]["apst"] == 100.0
        assert values["n0"]["kernel"] == values["n1"]["kernel"] != ""
        assert values["n1"]["memory-saver"] is None
        assert "exited 1" in errors["n1"]["memory-saver"]
