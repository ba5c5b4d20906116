"""Preflight (`sparkgate doctor`): is every node fit to run a release, before anything starts?

Two halves, kept apart so the rules can be tested without machines: `collect_facts` asks each
node (in parallel, through its transport) for raw facts - reachable, disk, memory, listening
ports and `flock` on the head (the cluster lock needs it), Python or Docker version, clock, the
cluster file's own checks, its host facts (`probes.facts`) - and `evaluate` turns facts into
OK / WARN / ERROR lines. ERROR fails the preflight; WARN is shown and never does.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from flows.cluster.ops.lock import FLOCK_MISSING, has_flock
from flows.cluster.probes.parsers import Value
from flows.cluster.probes.rules import fact_problem
from flows.cluster.probes.sampler import read_values
from flows.cluster.runtime.factory import runtime_for
from flows.cluster.transport.base import Transport
from flows.errors import ClusterError, HostKeyError, TransportError
from flows.spec.cluster import Cluster, Node, PreflightCheck
from flows.spec.probes import HostFact
from flows.spec.template import fill

Status = Literal["OK", "WARN", "ERROR"]
GIB = 1024**3
_FACT_TIMEOUT_S = 30.0


# -- models -------------------------------------------------------------------------------------


class Thresholds(BaseModel):
    """Limits of the built-in checks (WARN below the first, ERROR below the second)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    disk_warn_gib: float = 10.0
    disk_error_gib: float = 1.0
    memory_warn_gib: float = 4.0
    memory_error_gib: float = 1.0
    skew_warn_s: float = 0.5
    skew_error_s: float = 5.0
    min_python: tuple[int, int] = (3, 11)


MEMORY_MARGIN = 1.05  # WARN within 5 % above the engine's floor


class CustomOutcome(BaseModel):
    """What one declared check printed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    severity: Literal["ERROR", "WARN"]
    expect: str
    rc: int | None
    output: str
    error: str | None = None


class FactOutcome(BaseModel):
    """One declared host fact as read on a node (value None: it could not be read)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fact: HostFact
    value: Value | None = None
    error: str | None = None


class NodeFacts(BaseModel):
    """Raw facts from one node; None means "not collected" (unreachable or not applicable)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    head: bool = False
    reachable: bool
    unreachable_reason: str | None = None
    host_key_problem: bool = False
    disk_free: dict[str, int | None] = Field(default_factory=dict)
    disk_errors: dict[str, str] = Field(default_factory=dict)
    memory_available: int | None = None
    ports_in_use: dict[int, bool] = Field(default_factory=dict)
    python_version: str | None = None
    python_error: str | None = None
    docker_version: str | None = None
    docker_error: str | None = None
    flock_missing: bool | None = None
    clock_offset_s: float | None = None
    clock_uncertainty_s: float | None = None
    custom: list[CustomOutcome] = Field(default_factory=list)
    host_facts: list[FactOutcome] = Field(default_factory=list)


class CheckResult(BaseModel):
    """One line of the preflight report."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    check: str
    status: Status
    detail: str


class PreflightReport(BaseModel):
    """Every check of every node; fails when any line is an ERROR."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str
    results: list[CheckResult]
    host_facts: dict[str, dict[str, Value | None]] = Field(
        default_factory=dict,
        description="node -> host fact -> value read (None: unread), kept so a record keeps them",
    )
    host_fact_errors: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="node -> host fact -> why it could not be read"
    )

    @property
    def errors(self) -> list[CheckResult]:
        """The lines that fail the preflight."""
        return [item for item in self.results if item.status == "ERROR"]

    @property
    def ok(self) -> bool:
        """True when nothing is an ERROR (warnings never fail)."""
        return not self.errors

    def raise_for_errors(self) -> None:
        """ClusterError naming every failed check (exit 1)."""
        if self.errors:
            lines = "; ".join(f"{e.node}: {e.check}: {e.detail}" for e in self.errors)
            raise ClusterError(f"preflight of {self.cluster} failed: {lines}")


# -- pure parsing -------------------------------------------------------------------------------


def parse_df_available(output: str) -> int:
    """Free bytes from `df -Pk PATH` output."""
    lines = output.strip().splitlines()
    if len(lines) < 2:
        raise ValueError(f"unexpected df output: {output!r}")
    return int(lines[-1].split()[3]) * 1024


def parse_meminfo_available(text: str) -> int:
    """MemAvailable from /proc/meminfo, in bytes."""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise ValueError("no MemAvailable in /proc/meminfo")


def parse_listening_ports(proc_net_tcp: str) -> set[int]:
    """TCP ports in LISTEN state (st 0A) from /proc/net/tcp and /proc/net/tcp6 text."""
    ports: set[int] = set()
    for line in proc_net_tcp.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A" and ":" in fields[1]:
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def parse_python_version(output: str) -> tuple[int, int, int]:
    """(major, minor, micro) from `python --version` output."""
    found = re.search(r"Python (\d+)\.(\d+)\.(\d+)", output)
    if found is None:
        raise ValueError(f"not a Python version: {output.strip()!r}")
    major, minor, micro = (int(part) for part in found.groups())
    return major, minor, micro


# -- pure evaluation ----------------------------------------------------------------------------


def _level(value: float, warn_below: float, error_below: float) -> Status:
    if value < error_below:
        return "ERROR"
    return "WARN" if value < warn_below else "OK"


def _evaluate_node(facts: NodeFacts, limits: Thresholds) -> list[CheckResult]:
    def line(check: str, status: Status, detail: str) -> CheckResult:
        return CheckResult(node=facts.node, check=check, status=status, detail=detail)

    if not facts.reachable:
        check = "host key" if facts.host_key_problem else "reachable"
        return [line(check, "ERROR", facts.unreachable_reason or "unreachable")]
    found = [line("reachable", "OK", "commands run"), line("host key", "OK", "known")]
    for path, free in facts.disk_free.items():
        if free is None:
            found.append(line(f"disk {path}", "ERROR", facts.disk_errors.get(path, "unknown")))
            continue
        status = _level(free / GIB, limits.disk_warn_gib, limits.disk_error_gib)
        found.append(line(f"disk {path}", status, f"{free / GIB:.1f} GiB free"))
    if facts.memory_available is not None:
        gib = facts.memory_available / GIB
        status = _level(gib, limits.memory_warn_gib, limits.memory_error_gib)
        needs = f" (needs {limits.memory_error_gib:g} GiB)" if status != "OK" else ""
        found.append(line("memory", status, f"{gib:.1f} GiB available{needs}"))
    for port, used in sorted(facts.ports_in_use.items()):
        found.append(line(f"port {port}", "ERROR" if used else "OK", "in use" if used else "free"))
    if facts.flock_missing is not None:  # asked of the head, which holds the cluster lock
        missing = facts.flock_missing
        detail = FLOCK_MISSING if missing else "present (the cluster lock needs it)"
        found.append(line("flock", "ERROR" if missing else "OK", detail))
    found.extend(_runtime_lines(facts, limits, line))
    found.extend(_custom_lines(facts, line))
    found.extend(_fact_lines(facts, line))
    return found


Line = Callable[[str, Status, str], CheckResult]


def _runtime_lines(facts: NodeFacts, limits: Thresholds, line: Line) -> list[CheckResult]:
    found: list[CheckResult] = []
    if facts.python_error is not None:
        found.append(line("python version", "ERROR", facts.python_error))
    elif facts.python_version is not None:
        version = parse_python_version(facts.python_version)
        wanted = ".".join(map(str, limits.min_python))
        good = version[:2] >= limits.min_python
        text = f"{'.'.join(map(str, version))} (needs >= {wanted})"
        found.append(line("python version", "OK" if good else "ERROR", text))
    if facts.docker_error is not None:
        found.append(line("docker daemon", "ERROR", facts.docker_error))
    elif facts.docker_version is not None:
        found.append(line("docker daemon", "OK", f"version {facts.docker_version}"))
    return found


def _custom_lines(facts: NodeFacts, line: Line) -> list[CheckResult]:
    found: list[CheckResult] = []
    for outcome in facts.custom:
        last = outcome.output.strip().splitlines()[-1:] or [""]
        if outcome.error is not None:
            found.append(line(outcome.name, outcome.severity, outcome.error))
        elif outcome.rc != 0:
            found.append(line(outcome.name, outcome.severity, f"exited {outcome.rc}: {last[0]}"))
        elif not re.search(outcome.expect, outcome.output):
            detail = f"output {last[0]!r} does not match /{outcome.expect}/"
            found.append(line(outcome.name, outcome.severity, detail))
        else:
            found.append(line(outcome.name, "OK", last[0][:80]))
    return found


def _fact_lines(facts: NodeFacts, line: Line) -> list[CheckResult]:
    """A host fact that differs from its expectation names the fact and both values."""
    found: list[CheckResult] = []
    for outcome in facts.host_facts:
        fact = outcome.fact
        problem = outcome.error or fact_problem(fact, outcome.value)
        if problem is not None:
            found.append(line(fact.name, fact.severity, problem))
        else:
            shown = outcome.value if isinstance(outcome.value, str) else f"{outcome.value:g}"
            found.append(line(fact.name, "OK", shown[:80]))
    return found


def _skew_lines(facts: Sequence[NodeFacts], limits: Thresholds) -> list[CheckResult]:
    """Clock offset of each node to this machine, less the measurement's own uncertainty."""
    found: list[CheckResult] = []
    for item in facts:
        if item.clock_offset_s is None:
            continue
        skew = max(abs(item.clock_offset_s) - (item.clock_uncertainty_s or 0.0), 0.0)
        status = _level(-skew, -limits.skew_warn_s, -limits.skew_error_s)
        detail = f"{item.clock_offset_s:+.3f} s vs this machine"
        found.append(CheckResult(node=item.node, check="clock", status=status, detail=detail))
    return found


def evaluate(cluster: str, facts: Sequence[NodeFacts], limits: Thresholds) -> PreflightReport:
    """Turn collected facts into the report (pure: no I/O)."""
    results = [result for item in facts for result in _evaluate_node(item, limits)]
    values, errors = fact_values(facts)
    return PreflightReport(
        cluster=cluster,
        results=[*results, *_skew_lines(facts, limits)],
        host_facts=values,
        host_fact_errors=errors,
    )


def fact_values(
    facts: Sequence[NodeFacts],
) -> tuple[dict[str, dict[str, Value | None]], dict[str, dict[str, str]]]:
    """Each reachable node's host facts by name, and why any of them could not be read."""
    values = {
        item.node: {outcome.fact.name: outcome.value for outcome in item.host_facts}
        for item in facts
        if item.reachable
    }
    errors = {
        item.node: {o.fact.name: o.error for o in item.host_facts if o.error is not None}
        for item in facts
        if any(o.error is not None for o in item.host_facts)
    }
    return values, errors


# -- collection ---------------------------------------------------------------------------------


def node_values(cluster: Cluster, node: Node) -> dict[str, str]:
    """Placeholder values preflight can fill for `node` (no release-specific ones)."""
    user = getattr(cluster.transport, "user", "")
    values = {
        "rank": str(node.rank),
        "nnodes": str(len(cluster.nodes)),
        "node": node.name,
        "address": node.address,
        "user": user,
        "head_address": cluster.head.address,
        "rendezvous_port": str(cluster.ports.rendezvous),
        "port": str(cluster.ports.api),
        "workdir": node.workdir,
        "python": cluster.runtime.python,
    }
    values["python"] = fill(cluster.runtime.python, values)
    for name, cache in cluster.engine.caches.items():
        values[f"cache.{name}"] = fill(cache.path, values)
    return values


def _free_bytes(transport: Transport, path: str) -> int:
    """Free space of the file system that holds path (or its nearest existing parent)."""
    candidate = PurePosixPath(path)
    for probe in (candidate, *candidate.parents):
        done = transport.run(["df", "-Pk", "--", str(probe)], timeout=_FACT_TIMEOUT_S)
        if done.ok:
            return parse_df_available(done.stdout)
    raise TransportError(f"df failed for {path}")


def _clock(transport: Transport) -> tuple[float, float]:
    before = time.time()
    done = transport.run(["date", "+%s.%N"], timeout=_FACT_TIMEOUT_S, check=True)
    after = time.time()
    return float(done.stdout.strip()) - (before + after) / 2, (after - before) / 2


def _custom(transport: Transport, check: PreflightCheck, values: dict[str, str]) -> CustomOutcome:
    base = {"name": check.name, "severity": check.severity, "expect": check.expect}
    try:
        argv = [fill(arg, values) for arg in check.argv]
    except KeyError as missing:
        error = f"uses {{{missing.args[0]}}}, which preflight cannot fill"
        return CustomOutcome(**base, rc=None, output="", error=error)
    try:
        done = transport.run(argv, timeout=check.timeout_s)
    except TransportError as failure:
        return CustomOutcome(**base, rc=None, output="", error=str(failure))
    return CustomOutcome(**base, rc=done.rc, output=done.stdout + done.stderr)


def _host_fact(transport: Transport, fact: HostFact, values: dict[str, str]) -> FactOutcome:
    try:
        argv = [fill(arg, values) for arg in fact.argv]
    except KeyError as missing:
        return FactOutcome(
            fact=fact, error=f"uses {{{missing.args[0]}}}, which preflight cannot fill"
        )
    found, error = read_values(transport, argv, fact.parse, fact.timeout_s)
    if error is not None:
        return FactOutcome(fact=fact, error=error)
    return FactOutcome(fact=fact, value=found.get(fact.value))


def collect_node(cluster: Cluster, node: Node, transport: Transport) -> NodeFacts:
    """Ask one node for every fact; an unreachable node yields facts that say why."""
    values = node_values(cluster, node)
    try:
        transport.run(["true"], timeout=_FACT_TIMEOUT_S, check=True)
    except HostKeyError as refused:
        return NodeFacts(
            node=node.name, reachable=False, unreachable_reason=str(refused), host_key_problem=True
        )
    except TransportError as failure:
        return NodeFacts(node=node.name, reachable=False, unreachable_reason=str(failure))
    facts: dict[str, object] = {"node": node.name, "head": node.head, "reachable": True}
    disk: dict[str, int | None] = {}
    disk_errors: dict[str, str] = {}
    paths = [node.workdir, *(values[f"cache.{name}"] for name in cluster.engine.caches)]
    for path in dict.fromkeys(paths):
        try:
            disk[path] = _free_bytes(transport, path)
        except (TransportError, ValueError) as failure:
            disk[path], disk_errors[path] = None, str(failure)
    facts |= {"disk_free": disk, "disk_errors": disk_errors}
    meminfo = transport.run(["cat", "/proc/meminfo"], timeout=_FACT_TIMEOUT_S)
    if meminfo.ok:
        facts["memory_available"] = parse_meminfo_available(meminfo.stdout)
    if node.head:
        tables = transport.run(["cat", "/proc/net/tcp", "/proc/net/tcp6"], timeout=_FACT_TIMEOUT_S)
        listening = parse_listening_ports(tables.stdout)
        ports = (cluster.ports.api, cluster.ports.rendezvous)
        facts["ports_in_use"] = {port: port in listening for port in ports}
        facts["flock_missing"] = not has_flock(transport)
    facts |= runtime_for(cluster, {node.name: transport}).node_facts(node, values)
    facts["clock_offset_s"], facts["clock_uncertainty_s"] = _clock(transport)
    facts["custom"] = [_custom(transport, check, values) for check in cluster.preflight]
    facts["host_facts"] = [_host_fact(transport, fact, values) for fact in cluster.probes.facts]
    return NodeFacts.model_validate(facts)


def read_host_facts(
    cluster: Cluster, transport_of: Callable[[Node], Transport]
) -> tuple[dict[str, dict[str, Value | None]], dict[str, dict[str, str]]]:
    """Only the declared host facts of every node (in parallel), as `bench run -c` keeps them
    with an arm: no ports or disk checks, so a cluster that is serving can be read."""

    def one(node: Node) -> NodeFacts:
        transport, values = transport_of(node), node_values(cluster, node)
        outcomes = [_host_fact(transport, fact, values) for fact in cluster.probes.facts]
        return NodeFacts(node=node.name, reachable=True, host_facts=outcomes)

    with ThreadPoolExecutor(max_workers=max(len(cluster.nodes), 1)) as pool:
        return fact_values(list(pool.map(one, cluster.nodes)))


def run_preflight(
    cluster: Cluster,
    transport_of: Callable[[Node], Transport],
    limits: Thresholds | None = None,
) -> PreflightReport:
    """Collect facts from every node in parallel, then evaluate them."""
    with ThreadPoolExecutor(max_workers=max(len(cluster.nodes), 1)) as pool:
        facts = list(
            pool.map(lambda node: collect_node(cluster, node, transport_of(node)), cluster.nodes)
        )
    return evaluate(cluster.name, facts, limits or thresholds_for(cluster))


def thresholds_for(cluster: Cluster) -> Thresholds:
    """The built-in limits, with the engine's own memory floor when its profile names one, and
    the startup memory guard's threshold when the runtime arms one.

    A rank that starts on a node with less memory available than the engine needs dies (OOM,
    or a failed allocation) minutes into its boot; preflight refuses it before anything starts.
    A node already below its startup memory guard would be refused by the guard at boot (the
    recipe's memguard), so preflight says so first.
    """
    floors = [cluster.engine.min_free_memory_gib]
    guard = getattr(cluster.runtime, "memory_guard", None)
    if guard is not None:
        floors.append(guard.startup_gib)
    needed = max((floor for floor in floors if floor is not None), default=None)
    if needed is None:
        return Thresholds()
    defaults = Thresholds()
    return Thresholds(
        memory_error_gib=max(needed, defaults.memory_error_gib),
        memory_warn_gib=max(needed * MEMORY_MARGIN, defaults.memory_warn_gib),
    )
