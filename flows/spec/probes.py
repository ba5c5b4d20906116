"""Host probes of a cluster (the `probes:` section): facts read once, samples taken around arms.

A benchmark arm measures the release only when the hosts stayed as they were declared: a board
that throttles, a fabric that retransmits, a neighbour that steals CPU or a node short of memory
slows an arm for reasons that are not the release's. The release thread asks exactly for these
readings (clocks, throttle reasons, power, temperature with `nvidia-smi`, the RDMA counters
before and after decode, `vmstat`), and the recipe's `doctor --live` checks host facts (kernel,
modules package, memory-saver, APST). A probe is a command per node and a typed parser
(`flows.cluster.probes.parsers`) that turns its output into named values; a fact compares one
value with its expectation in preflight, a sample's limits say when an arm was disturbed and
when a node has cooled down enough to start the next one.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from flows.spec.base import Problem, SpecContext, SpecModel

Parser = Literal[
    "text", "number", "proc_stat", "meminfo", "pressure", "thermal", "nvidia_smi", "counters"
]
PARSE_HELP = (
    "How the output is read: text (stripped), number (the first number), proc_stat (/proc/stat "
    "cpu line: steal_pct between two readings), meminfo (/proc/meminfo fields in GiB), pressure "
    "(/proc/pressure/*: some_avg10, full_avg10, ...), thermal (thermal zone temp files in "
    "millidegrees: max_c), nvidia_smi (`--format=csv` query: one value per column), counters "
    "(`name: value` lines of `ethtool -S`, or `path:value` of `grep -H`, summed per name)."
)


class HostFact(SpecModel):
    """A host fact read once in preflight and checked against its expectation."""

    name: str = Field(min_length=1, description="Name shown in reports.")
    argv: list[str] = Field(min_length=1, description="Command (node placeholders allowed).")
    parse: Parser = Field(default="text", description=PARSE_HELP)
    value: str = Field(default="value", description="Which parsed value is the fact.")
    expect: str | None = Field(default=None, description="The value exactly (as text).")
    pattern: str | None = Field(default=None, description="Regex the value must match (search).")
    at_least: float | None = Field(default=None, description="The value must be a number >= it.")
    at_most: float | None = Field(default=None, description="The value must be a number <= it.")
    severity: Literal["ERROR", "WARN"] = Field(default="ERROR", description="ERROR stops.")
    timeout_s: float = Field(default=30, gt=0, description="Timeout of the command.")


class Limit(SpecModel):
    """What one sampled value may do during an arm, and what it must be before one starts."""

    value: str = Field(min_length=1, description="The parsed value, e.g. steal_pct or avg10.")
    max: float | None = Field(default=None, description="Disturbed when a sample is above it.")
    min: float | None = Field(default=None, description="Disturbed when a sample is below it.")
    max_growth: float | None = Field(
        default=None, ge=0, description="Disturbed when it grows by more over the arm (counters)."
    )
    forbid_bits: int | None = Field(
        default=None, ge=1, description="Disturbed when any of these bits is set (a bitmask)."
    )
    cool_max: float | None = Field(
        default=None, description="Before an arm: wait until every node is at or below it."
    )
    cool_min: float | None = Field(
        default=None, description="Before an arm: wait until every node is at or above it."
    )


class HostSample(SpecModel):
    """A reading taken on every node before, during (every `every_s`) and after each arm."""

    name: str = Field(min_length=1, description="Name shown in reports and probes.json.")
    argv: list[str] = Field(min_length=1, description="Command (node placeholders allowed).")
    parse: Parser = Field(description=PARSE_HELP)
    limits: list[Limit] = Field(default=[], description="Limits of its values (none: recorded).")
    timeout_s: float = Field(default=10, gt=0, description="Timeout of one reading.")


class Hygiene(SpecModel):
    """How arms are kept clean: sampling period, cool-down bound and re-measurements."""

    every_s: float = Field(default=5, gt=0, description="Sampling period during an arm.")
    cooldown_timeout_s: float = Field(
        default=300, gt=0, description="Longest wait for every node to cool down before an arm."
    )
    remeasure: int = Field(
        default=2, ge=0, description="How often a disturbed arm is measured again (then fails)."
    )


class Probes(SpecModel):
    """Host facts for preflight and host samples around every benchmark arm."""

    facts: list[HostFact] = Field(default=[], description="Read once in preflight.")
    samples: list[HostSample] = Field(default=[], description="Read around every arm.")
    hygiene: Hygiene = Field(default=Hygiene(), description="Cool-down and re-measurement.")

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """Unique names, valid regexes, and a fact or limit that says something."""
        del context
        found: list[Problem] = []
        for section, names in (
            ("facts", [f.name for f in self.facts]),
            ("samples", [s.name for s in self.samples]),
        ):
            found.extend(
                Problem((section, i, "name"), f"duplicate probe {name!r}", "unique names")
                for i, name in enumerate(names)
                if name in names[:i]
            )
        for i, fact in enumerate(self.facts):
            if fact.pattern is not None:
                try:
                    re.compile(fact.pattern)
                except re.error as error:
                    found.append(Problem(("facts", i, "pattern"), f"invalid regex: {error}"))
            wants = (fact.expect, fact.pattern, fact.at_least, fact.at_most)
            if all(want is None for want in wants):
                found.append(
                    Problem(
                        ("facts", i),
                        "a fact without an expectation",
                        "expect, pattern, at_least or at_most",
                    )
                )
        for i, sample in enumerate(self.samples):
            for j, limit in enumerate(sample.limits):
                bounds = (limit.max, limit.min, limit.max_growth, limit.forbid_bits)
                cools = (limit.cool_max, limit.cool_min)
                if all(bound is None for bound in (*bounds, *cools)):
                    found.append(
                        Problem(
                            ("samples", i, "limits", j),
                            "a limit without a bound",
                            "max, min, max_growth, forbid_bits, cool_max or cool_min",
                        )
                    )
        return found
