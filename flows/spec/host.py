"""Host layers of a release (`host:`): what a release changes on the nodes rather than in the image.

A host change (a sysfs setting, a driver, a new kernel) can slow or speed the recipe as much as
a kernel patch, so it is qualified like one: the same gates, against the same image. A layer
names the cluster's fact probes (`probes.facts`) it changes and what each must read after the
change. A reversible layer carries the commands that apply and revert it, run on every node;
the benchmark then alternates arms with the layer applied (candidate) and reverted (previous) in
one session. An irreversible layer (`reversible: false`, a new kernel) is already on the nodes:
its facts must hold at preflight, and no arm of the previous state can be run on them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

from pydantic import Field

from flows.errors import SpecError
from flows.spec.base import Problem, SpecContext, SpecModel
from flows.spec.yamlfile import format_loc

LAYER_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class FactWant(SpecModel):
    """What a fact must read once the layer is on (the same expectations a cluster fact has)."""

    expect: str | None = Field(default=None, description="The value exactly (as text).")
    pattern: str | None = Field(default=None, description="Regex the value must match (search).")
    at_least: float | None = Field(default=None, description="The value must be a number >= it.")
    at_most: float | None = Field(default=None, description="The value must be a number <= it.")

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """An expectation that says something, with a valid regex."""
        del context
        if all(want is None for want in (self.expect, self.pattern, self.at_least, self.at_most)):
            return [Problem((), "an expectation is needed", "expect, pattern, at_least or at_most")]
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as error:
                return [Problem(("pattern",), f"invalid regex: {error}")]
        return []


class HostLayer(SpecModel):
    """One change of the nodes, qualified as the release's candidate."""

    name: Annotated[str, Field(pattern=LAYER_NAME)] = Field(description="Name in reports.")
    description: str = Field(default="", description="What the change is and why.")
    facts: dict[str, FactWant] = Field(
        min_length=1,
        description="The cluster's fact probes (probes.facts, by name) this layer changes, and "
        "what each must read once it is on.",
    )
    reversible: bool = Field(
        default=True,
        description="true: `apply` and `revert` switch it on every node, and the benchmark "
        "alternates arms with it on and off; false: already on the nodes (its facts are checked "
        "at preflight).",
    )
    apply: list[str] | None = Field(
        default=None, description="Command that applies it on a node (node placeholders allowed)."
    )
    revert: list[str] | None = Field(
        default=None, description="Command that reverts it on a node (node placeholders allowed)."
    )
    timeout_s: float = Field(default=120, gt=0, description="Timeout of apply and revert.")

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """A reversible layer says how to apply and revert it; an irreversible one says neither."""
        del context
        found: list[Problem] = []
        for key, argv in (("apply", self.apply), ("revert", self.revert)):
            if self.reversible and not argv:
                found.append(Problem((key,), "a reversible layer needs it", "a command (argv)"))
            if not self.reversible and argv is not None:
                found.append(
                    Problem((key,), "an irreversible layer has none", "no apply and no revert")
                )
        return found


def check_layers(release_file: Path | str, layers: Sequence[HostLayer], facts: set[str]) -> None:
    """SpecError (exit 2) at the release file's line for a layer fact the cluster does not
    probe: a layer's facts are read with the cluster's own fact probes (`probes.facts`)."""
    from flows.spec.load import load_document  # noqa: PLC0415 - load imports the spec models

    for i, layer in enumerate(layers):
        for name in layer.facts:
            if name in facts:
                continue
            origin = load_document(release_file).origin_of(("host", i, "facts", name))
            raise SpecError(
                f"layer {layer.name!r} names fact {name!r}, which the cluster does not probe",
                file=origin.file,
                line=origin.line,
                key=format_loc(("host", i, "facts", name)),
                expected=f"one of the cluster's probes.facts: {', '.join(sorted(facts)) or 'none'}",
            )
