"""Host facts of a cluster, kept with an arm or a record, and two sets of them side by side.

A user who asks why their cluster is slower than the published one needs more than two tok/s
numbers: the recipe's release thread answers such a question by asking for the kernel, the
driver, memory-saver, APST and the fabric counters of the user's nodes. The facts here are what
preflight reads (`probes.facts` of a cluster file), or the `hosts:` section of a recipe release
manifest; `side_by_side` lines two sets up by name and says "not recorded" where a side lacks one.
Pure: reading files is `read_host_facts`, the one function here that touches the disk.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flows.errors import BenchError

FACTS_FILE = "host-facts.json"
"""The record's copy of the host facts preflight read (beside record.json)."""
NOT_RECORDED = "not recorded"
ALL_HOSTS = "all hosts"
"""The node name of facts a manifest gives once for every host."""

FactValue = float | str


class FactsFileError(BenchError):
    """A host facts file (or manifest section) that cannot be read as one: bad input, exit 2,
    naming the file and the key."""

    exit_code = 2


_FROZEN = ConfigDict(frozen=True, extra="forbid")


class HostFacts(BaseModel):
    """Each node's host facts as read once, by name (None: the node could not read it)."""

    model_config = _FROZEN

    kind: Literal["host-facts"] = "host-facts"
    cluster: str = Field(description="cluster the facts were read on")
    source: str = Field(description="where they come from: preflight, probes, a manifest")
    read_utc: str | None = Field(default=None, description="when they were read, UTC ISO-8601")
    nodes: dict[str, dict[str, FactValue | None]] = Field(description="node -> fact name -> value")
    errors: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="node -> fact name -> why it has no value"
    )

    def shown(self) -> dict[str, str]:
        """Fact name -> one value when every node agrees, else each node's (`n1: a; n2: b`)."""
        per_fact: dict[str, dict[str, str]] = {}
        for node, facts in self.nodes.items():
            for name, value in facts.items():
                text = _text(value) if value is not None else self._error(node, name)
                per_fact.setdefault(name, {})[node] = text
        return {
            name: next(iter(set(values.values())))
            if len(set(values.values())) == 1
            else "; ".join(f"{node}: {text}" for node, text in values.items())
            for name, values in per_fact.items()
        }

    def _error(self, node: str, name: str) -> str:
        return f"unread ({self.errors.get(node, {}).get(name, 'no value')})"


def _text(value: FactValue) -> str:
    return f"{value:g}" if isinstance(value, float) else value


def _key(name: str) -> str:
    """Names compare loosely: `page_size`, `page size` and `Page size` are one fact."""
    return re.sub(r"[\s_.]+", " ", name.strip().lower())


class FactRow(BaseModel):
    """One fact on both sides; `same` is None when a side did not record it."""

    model_config = _FROZEN

    fact: str
    new: str
    old: str
    same: bool | None


def side_by_side(new: HostFacts | None, old: HostFacts | None) -> list[FactRow]:
    """Every fact either side recorded, in the new side's order, then the old side's others."""
    left = {_key(k): (k, v) for k, v in (new.shown() if new else {}).items()}
    right = {_key(k): (k, v) for k, v in (old.shown() if old else {}).items()}
    rows = []
    for key in dict.fromkeys([*left, *right]):
        name = (left.get(key) or right[key])[0]
        a, b = left.get(key, (name, None))[1], right.get(key, (name, None))[1]
        same = None if a is None or b is None else a == b
        rows.append(FactRow(fact=name, new=a or NOT_RECORDED, old=b or NOT_RECORDED, same=same))
    return rows


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, FactValue]:
    """Nested manifest keys as dotted names: memory_saver.version, memory_policy.thp."""
    flat: dict[str, FactValue] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat |= _flatten(value, f"{name}.")
        elif isinstance(value, bool) or value is None:
            flat[name] = str(value).lower()
        elif isinstance(value, int | float):
            flat[name] = float(value)
        else:
            flat[name] = str(value)
    return flat


def manifest_facts(manifest: Mapping[str, Any], where: str) -> HostFacts | None:
    """The `hosts:` section of a recipe release manifest (one set for every host), if it has one.

    Raises:
        FactsFileError: when `hosts` is there but not a mapping.
    """
    hosts = manifest.get("hosts")
    if hosts is None:
        return None
    if not isinstance(hosts, Mapping):
        raise FactsFileError(f"{where}: hosts: expected a mapping of host facts")
    nodes = manifest.get("nodes")
    name = ", ".join(map(str, nodes)) if isinstance(nodes, Mapping) and nodes else "recipe"
    return HostFacts(
        cluster=name,
        source=f"recipe manifest {Path(where).name}",
        read_utc=str(manifest.get("captured_at")) if manifest.get("captured_at") else None,
        nodes={ALL_HOSTS: dict(_flatten(hosts))},
    )


def read_host_facts(path: Path) -> HostFacts:
    """Host facts from a file: a `host-facts.json` (or a record folder holding one) or a recipe
    release manifest with a `hosts:` section.

    Raises:
        FactsFileError: naming the file and what is wrong with it.
    """
    file = path / FACTS_FILE if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise FactsFileError(f"{file}: no such host facts file") from error
    except (OSError, UnicodeDecodeError) as error:
        raise FactsFileError(f"{file}: cannot read: {error}") from error
    except json.JSONDecodeError as error:
        raise FactsFileError(f"{file}:{error.lineno}: not JSON: {error.msg}") from error
    if not isinstance(data, dict):
        raise FactsFileError(f"{file}: expected host facts (kind: host-facts) or manifest hosts")
    if data.get("kind") == "host-facts":
        try:
            return HostFacts.model_validate(data)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "(top level)"
            raise FactsFileError(f"{file}: {where}: {first['msg']}") from error
    facts = manifest_facts(data, str(file))
    if facts is None:
        raise FactsFileError(
            f"{file}: kind: expected host facts (kind: host-facts) or a manifest with `hosts`"
        )
    return facts
