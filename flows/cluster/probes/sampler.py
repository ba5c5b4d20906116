"""Taking probe readings on the nodes (I/O): one reading, a whole round, and an arm's sampler.

A round reads every declared sample on every node in parallel, through the node's own
transport, and derives the values that need the previous round (steal between two /proc/stat
readings). `HostSampler` takes a round before an arm, one every `every_s` during it (a
background thread) and one after; `wait_until_cool` takes rounds until every node meets its
cool-down conditions, bounded, and fails with the last readings.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType

from flows.cluster.probes.parsers import Values, derive, parse
from flows.cluster.probes.rules import ArmProbes, Phase, Reading, crossings, not_cooled
from flows.cluster.transport.base import Transport
from flows.errors import ClusterError, TransportError
from flows.spec.cluster import Cluster
from flows.spec.probes import Parser
from flows.spec.template import fill

# The shortest window a value between two readings is taken over before the first arm.
BASELINE_S = 0.5


def read_values(
    transport: Transport, argv: Sequence[str], kind: Parser, timeout_s: float
) -> tuple[Values, str | None]:
    """One probe's values on one node, or the reason it has none (never raises)."""
    try:
        done = transport.run(list(argv), timeout=timeout_s)
    except TransportError as failure:
        return {}, str(failure)
    if not done.ok:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        return {}, f"exited {done.rc}: {last[0][:200]}"
    try:
        return parse(kind, done.stdout), None
    except ValueError as error:
        return {}, str(error)


class HostSampler:
    """Readings of every node's declared samples around one arm (`with` it around the arm)."""

    def __init__(
        self,
        cluster: Cluster,
        transports: Mapping[str, Transport],
        values_of: Callable[[str], Mapping[str, str]],
    ) -> None:
        self._cluster, self._transports = cluster, transports
        self._argv = {
            (node.name, sample.name): [fill(arg, values_of(node.name)) for arg in sample.argv]
            for node in cluster.nodes
            for sample in cluster.probes.samples
        }
        self._every_s = cluster.probes.hygiene.every_s
        self._began = time.monotonic()
        self._last: dict[tuple[str, str], Values] = {}
        self._readings: list[Reading] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="host-sampler", daemon=True)

    def round(self, phase: Phase) -> list[Reading]:
        """Read every sample on every node once (nodes in parallel) and keep the readings."""
        nodes = self._cluster.nodes
        with ThreadPoolExecutor(max_workers=max(len(nodes), 1)) as pool:
            found = [
                r for rs in pool.map(lambda n: self._node_round(n.name, phase), nodes) for r in rs
            ]
        with self._lock:
            self._readings.extend(found)
        return found

    def has_baseline(self) -> bool:
        """Whether a round was taken, so values between two readings (steal) can be derived."""
        return bool(self._last)

    def _node_round(self, node: str, phase: Phase) -> list[Reading]:
        found: list[Reading] = []
        for sample in self._cluster.probes.samples:
            values, error = read_values(
                self._transports[node],
                self._argv[node, sample.name],
                sample.parse,
                sample.timeout_s,
            )
            if error is None:
                values = derive(sample.parse, self._last.get((node, sample.name)), values)
                self._last[node, sample.name] = values
            at_s = round(time.monotonic() - self._began, 3)
            found.append(Reading(node=node, probe=sample.name, phase=phase, at_s=at_s,
                                 values=values, error=error))  # fmt: skip
        return found

    def __enter__(self) -> HostSampler:
        with self._lock:
            self._readings.clear()
        self._began = time.monotonic()
        self.round("before")
        self._stop = threading.Event()  # one sampler serves every arm of a session
        self._thread = threading.Thread(target=self._watch, name="host-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=self._every_s + 60)
        self.round("after")

    def _watch(self) -> None:
        while not self._stop.wait(self._every_s):
            self.round("during")

    def result(self) -> ArmProbes:
        """Every reading of the arm and the limits they crossed."""
        with self._lock:
            readings = list(self._readings)
        samples = self._cluster.probes.samples
        return ArmProbes(
            every_s=self._every_s, readings=readings, crossings=crossings(samples, readings)
        )


def wait_until_cool(
    sampler: HostSampler,
    cluster: Cluster,
    *,
    say: Callable[[str], None] = lambda _line: None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Reading]:
    """Rounds until every node meets every cool-down condition; ClusterError with the last
    readings after `cooldown_timeout_s`.

    The session's first cool-down takes a baseline round first: a value between two readings
    (steal) has none on the first, which read as "no reading" and cost a whole `every_s` wait."""
    hygiene = cluster.probes.hygiene
    began = time.monotonic()
    if not sampler.has_baseline():
        sampler.round("cooldown")
        sleep(min(hygiene.every_s, BASELINE_S))
    while True:
        latest = sampler.round("cooldown")
        waiting = not_cooled(cluster.probes.samples, latest)
        if not waiting:
            return latest
        waited = time.monotonic() - began
        if waited >= hygiene.cooldown_timeout_s:
            raise ClusterError(
                f"nodes did not cool down within {hygiene.cooldown_timeout_s:g}s: "
                + "; ".join(waiting)
            )
        say(f"cooling down ({waited:.0f}s): {'; '.join(waiting[:3])}")
        sleep(hygiene.every_s)
