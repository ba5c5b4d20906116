"""Switching a release's host layers on the nodes (I/O): apply, revert, read their facts.

A qualification of a release with host layers starts from a known state (every reversible
layer reverted, its facts read: `found`), applies the layers and checks their facts before the
gates run, lets the benchmark switch them per arm (on for the candidate, off for the previous
release), and reverts them when it ends, whether it passed, failed or crashed, so the cluster is
left as it was found. Every switch and its facts go to the record's `host.json` as it happens.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TypeVar

from flows.cluster.ops.preflight import node_values
from flows.cluster.probes.layers import (
    Action,
    FactReading,
    HostRecord,
    LayerStep,
    layer_fact,
    reading_problem,
    step_problems,
)
from flows.cluster.probes.parsers import Value
from flows.cluster.probes.sampler import read_values
from flows.cluster.transport.base import Transport
from flows.errors import ClusterError, TransportError
from flows.spec.cluster import Cluster
from flows.spec.host import HostLayer
from flows.spec.template import fill

T = TypeVar("T")


class HostLayers:
    """A release's host layers on one held cluster, and the record of every switch."""

    def __init__(
        self,
        cluster: Cluster,
        layers: Sequence[HostLayer],
        transports: Mapping[str, Transport],
        *,
        say: Callable[[str], None] = lambda _line: None,
        on_step: Callable[[HostRecord], None] = lambda _record: None,
    ) -> None:
        self.cluster, self.layers, self.transports = cluster, list(layers), transports
        self.say, self.on_step = say, on_step
        self.steps: list[LayerStep] = []
        self.before: dict[tuple[str, str, str], Value | None] = {}
        self.on: bool | None = None

    @property
    def reversible(self) -> list[HostLayer]:
        """The layers this run switches."""
        return [layer for layer in self.layers if layer.reversible]

    def record(self) -> HostRecord:
        """The layers and every step so far."""
        return HostRecord(layers=self.layers, steps=self.steps)

    def begin(self) -> None:
        """Known state, then on: revert every reversible layer and read its facts (what it is
        compared with), read the irreversible layers' facts, apply and check."""
        for layer in self.layers:
            if layer.reversible:
                self._switch(layer, "revert", None, check=False)
            else:
                self._raise_for(self._step(layer, "found", None, 0.0))
        self.before = {
            (step.layer, r.node, r.fact): r.value for step in self.steps for r in step.readings
        }
        self.switch(on=True)

    def switch(self, *, on: bool, arm: int | None = None, check: bool = True) -> None:
        """Apply (on) or revert every reversible layer on every node and check its facts:
        ClusterError naming the node, layer, fact and both values when one is wrong."""
        layers = self.reversible if on else list(reversed(self.reversible))
        for layer in layers:
            self._switch(layer, "apply" if on else "revert", arm, check=check)
        self.on = on

    def for_role(self, role: str, arm: int) -> None:
        """Before a benchmark arm: the layers on for the candidate, off for the previous
        release."""
        on = role == "candidate"
        self.say(f"arm {arm} ({role}): host layers {'applied' if on else 'reverted'}")
        self.switch(on=on, arm=arm)

    def end(self) -> None:
        """Revert every reversible layer (the cluster is left as it was found); a revert that
        fails is said and recorded, never raised over the run's own outcome."""
        first = len(self.steps)
        try:
            self.switch(on=False, check=False)
        except (ClusterError, TransportError) as failure:
            self.say(f"host layers: revert failed: {failure}")
            return
        for step in self.steps[first:]:
            for problem in step_problems(step):
                self.say(f"host layers: after the final revert: {problem}")

    def _switch(self, layer: HostLayer, action: Action, arm: int | None, *, check: bool) -> None:
        argv = layer.apply if action == "apply" else layer.revert
        began = time.monotonic()
        if argv is not None:
            self._on_every_node(lambda node: self._command(node, layer, action, argv))
        step = self._step(layer, action, arm, time.monotonic() - began)
        if check:
            self._raise_for(step)

    def _step(self, layer: HostLayer, action: Action, arm: int | None, seconds: float) -> LayerStep:
        readings = self._on_every_node(lambda node: self._facts(node, layer, action))
        step = LayerStep(
            layer=layer.name, action=action, arm=arm, at=datetime.now(UTC),
            seconds=round(seconds, 3), readings=[r for rs in readings for r in rs],
        )  # fmt: skip
        self.steps.append(step)
        self.on_step(self.record())
        return step

    def _raise_for(self, step: LayerStep) -> None:
        problems = step_problems(step)
        if problems:
            raise ClusterError(f"host layer {step.layer}: " + "; ".join(problems))

    def _on_every_node(self, work: Callable[[str], T]) -> list[T]:
        nodes = [node.name for node in self.cluster.nodes]
        with ThreadPoolExecutor(max_workers=max(len(nodes), 1)) as pool:
            return list(pool.map(work, nodes))

    def _command(self, node: str, layer: HostLayer, action: Action, argv: list[str]) -> None:
        values = node_values(self.cluster, self.cluster.node(node))
        filled = [fill(arg, values) for arg in argv]
        done = self.transports[node].run(filled, timeout=layer.timeout_s)
        if not done.ok:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
            raise ClusterError(
                f"host layer {layer.name}: {action} on {node} exited {done.rc}: {last[0][:200]}"
            )

    def _facts(self, node: str, layer: HostLayer, action: Action) -> list[FactReading]:
        values = node_values(self.cluster, self.cluster.node(node))
        probes = {fact.name: fact for fact in self.cluster.probes.facts}
        found: list[FactReading] = []
        for name, want in layer.facts.items():
            fact = layer_fact(probes[name], want)
            argv = [fill(arg, values) for arg in fact.argv]
            read, error = read_values(self.transports[node], argv, fact.parse, fact.timeout_s)
            reading = FactReading(node=node, fact=name, value=read.get(fact.value), error=error)
            if action != "revert":  # on: the layer's expectation
                problem = reading_problem(want, reading, None)
            elif self.before:  # off again: what it read before the layer was first applied
                problem = reading_problem(None, reading, self.before.get((layer.name, node, name)))
            else:  # the first revert: what it reads is the state compared with
                problem = reading.error
            found.append(reading.model_copy(update={"problem": problem}))
        return found


@contextmanager
def host_layers_on(
    cluster: Cluster,
    layers: Sequence[HostLayer],
    transports: Mapping[str, Transport],
    *,
    say: Callable[[str], None] = lambda _line: None,
    on_step: Callable[[HostRecord], None] = lambda _record: None,
) -> Iterator[HostLayers | None]:
    """The layers on for the body (None without layers: nothing is touched), reverted after it
    however it ends."""
    if not layers:
        yield None
        return
    host = HostLayers(cluster, layers, transports, say=say, on_step=on_step)
    try:
        host.begin()
        say(f"host layers on: {', '.join(layer.name for layer in layers)}")
        yield host
    finally:
        host.end()
