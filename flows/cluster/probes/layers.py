"""Host layers' rules (pure): which cluster facts a layer checks, with what expectation, and what
the record keeps of every switch.

A layer names the cluster's fact probes; the probe's command and parser are the cluster's and
the expectation is the layer's (what the fact must read once the layer is on). An irreversible
layer is already on the nodes, so preflight checks its facts with the layer's expectations
instead of the cluster's (a new kernel is exactly what the cluster file did not expect).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from flows.cluster.probes.parsers import Value
from flows.cluster.probes.rules import fact_problem
from flows.spec.cluster import Cluster
from flows.spec.host import FactWant, HostLayer
from flows.spec.probes import HostFact

Action = Literal["found", "revert", "apply"]
_FROZEN = ConfigDict(frozen=True, extra="forbid")


def layer_fact(fact: HostFact, want: FactWant) -> HostFact:
    """The cluster's fact probe with the layer's expectation in place of the cluster's."""
    return fact.model_copy(update=want.model_dump())


def with_layers_on(cluster: Cluster, layers: Sequence[HostLayer]) -> Cluster:
    """The cluster as preflight checks it when `layers` are already on its nodes."""
    wants = {name: want for layer in layers for name, want in layer.facts.items()}
    if not wants:
        return cluster
    facts = [
        layer_fact(fact, wants[fact.name]) if fact.name in wants else fact
        for fact in cluster.probes.facts
    ]
    probes = cluster.probes.model_copy(update={"facts": facts})
    return cluster.model_copy(update={"probes": probes})


class FactReading(BaseModel):
    """One layer fact read on one node after a switch, and why it is wrong (None: it is not)."""

    model_config = _FROZEN

    node: str
    fact: str
    value: Value | None = None
    error: str | None = None
    problem: str | None = None


class LayerStep(BaseModel):
    """One switch of one layer on every node (or only a reading: `found`), with its facts."""

    model_config = _FROZEN

    layer: str
    action: Action
    arm: int | None = None
    """The benchmark arm the switch was made for (None: before or after the gates)."""
    at: datetime
    seconds: float
    readings: list[FactReading]


class HostRecord(BaseModel):
    """What `host.json` of a record holds: the layers and every switch with its facts."""

    model_config = _FROZEN

    layers: list[HostLayer]
    steps: list[LayerStep] = []


def reading_problem(
    want: FactWant | None, reading: FactReading, before: Value | None
) -> str | None:
    """Why a fact read after a switch is wrong: after `apply`, against the layer's expectation;
    after `revert`, unless it reads what it read before the layer was first applied."""
    if reading.error is not None:
        return reading.error
    if want is not None:
        probe = HostFact(name=reading.fact, argv=["true"], **want.model_dump())
        return fact_problem(probe, reading.value)
    if reading.value != before:
        return f"is {_shown(reading.value)}, expected {_shown(before)} as before the layer"
    return None


def _shown(value: Value | None) -> str:
    if value is None:
        return "nothing"
    return repr(value) if isinstance(value, str) else f"{value:g}"


def step_problems(step: LayerStep) -> list[str]:
    """One line per wrong fact of a step: node, layer, fact and both values."""
    return [
        f"{r.node}: {step.layer} {step.action}: {r.fact} {r.problem}"
        for r in step.readings
        if r.problem is not None
    ]
