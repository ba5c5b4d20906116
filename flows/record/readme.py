"""Render a record as its README.md: the verdict, what the benchmark found and its largest
intervals first, then what changed, then every gate's tables.

Pure: a `Record` in, markdown out; each gate's section is its story's (`flows.gates.story`).
`publish` writes its output and `verify` renders it again from the raw stage files and compares,
so every figure a reader sees in the README can be traced back to a result.json. The layout
follows the recipe's release notes: results tables `workload | previous | candidate (change
[interval])`, a boots table `boot | ready | what happened`, the determinism scenarios, and the
tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flows.gates.markdown import DASH, markdown_table, number
from flows.record import tables
from flows.record.model import Record, StageEntry
from flows.record.outcome import lead

# Bump whenever the README layout changes: verify re-renders only records of the same layout
# (older ones are still guarded by the README's SHA-256 taken at publish).
RENDER_VERSION = 3


def render_readme(record: Record) -> str:
    """The README of a record."""
    lines = [*_verdict(record), *_changes(record)]
    for stage in record.ordered_stages():
        entry = record.stages.get(stage)
        story = tables.story_of(stage)
        lines += ["", f"## {story.heading if story is not None else stage}", ""]
        if entry is None:
            lines.append("Not run.")
            continue
        lines.append(f"**{entry.outcome}**: {entry.reason}")
        if story is not None and entry.summary is not None:  # a skipped gate has no figures
            try:
                lines += story.section(entry.summary, record)
            except (TypeError, ValueError, KeyError, AttributeError) as error:
                lines += ["", f"(summary unreadable: {error})"]
        lines += _evidence(entry)
    lines += _about(record)
    return "\n".join(lines).rstrip() + "\n"


def _verdict(record: Record) -> list[str]:
    verdict = record.verdict or "in progress"
    lines = [
        f"# {record.release_name}: {verdict}",
        "",
        *lead(record),
        "",
        (
            f"Release `{record.release_name}` on cluster `{record.cluster_name}`, build "
            f"`{record.build_digest}`, record `{record.name}`."
        ),
        "",
    ]
    rows = []
    for stage in record.ordered_stages():
        entry = record.stages.get(stage)
        if entry is None:
            rows.append([stage, "not run", "", DASH])
        else:
            rows.append(
                [
                    stage,
                    entry.outcome,
                    tables.headline(stage, entry.summary),
                    number(entry.seconds, "s"),
                ]
            )
    return lines + markdown_table(["gate", "outcome", "headline", "took"], rows)


def _changes(record: Record) -> list[str]:
    release = record.release
    outputs = release.get("outputs") or {}
    change = outputs.get("change", "?")
    declared = (
        f"changed ({outputs.get('reason')})"
        if change == "changed"
        else f"{change} (outputs must equal the previous release's, token for token)"
    )
    options = (release.get("engine") or {}).get("options") or {}
    lines = [
        "",
        "## What changed",
        "",
        f"- Release: `{record.release_name}`: {release.get('description') or '(no description)'}",
        f"- Previous: {f'`{record.previous}`' if record.previous else 'none (first release)'}",
        f"- Declared outputs: {declared}",
    ]
    if options:
        shown = ", ".join(f"`{key}={value}`" for key, value in sorted(options.items()))
        lines.append(f"- Engine options: {shown}")
    return lines + [_layer_line(layer) for layer in release.get("host") or []]


def _layer_line(layer: dict[str, Any]) -> str:
    """One host layer: what changes on the nodes and what its facts must read (every switch and
    its readings are in host.json)."""
    kind = "reversible" if layer.get("reversible", True) else "irreversible"
    wants = []
    for name, want in (layer.get("facts") or {}).items():
        said = [
            f"{key.replace('_', ' ')} {value}" for key, value in want.items() if value is not None
        ]
        wants.append(f"{name} {', '.join(said)}")
    about = f": {layer['description']}" if layer.get("description") else ""
    return (
        f"- Host layer `{layer.get('name')}` ({kind}){about}; facts after it: {'; '.join(wants)} "
        "(every switch and its readings: `host.json`)"
    )


def _evidence(entry: StageEntry) -> list[str]:
    if not entry.evidence:
        return []
    return ["", "Evidence of failed attempts:", "", *(f"- `{item}`" for item in entry.evidence)]


def _about(record: Record) -> list[str]:
    lines = ["", "## About this record", ""]
    lines.append(f"- Opened {_when(record.created_at)}, published {_when(record.published_at)}")
    if record.wall_s is not None:
        lines[-1] += f" ({record.wall_s:.0f} s)"
    if record.versions:
        shown = ", ".join(f"{key} {value}" for key, value in sorted(record.versions.items()))
        lines.append(f"- Versions: {shown}")
    inventory = record.host_inventory
    if isinstance(inventory, Mapping):
        lines.append(f"- Hosts: {', '.join(sorted(str(name) for name in inventory))}")
    if record.extras:
        lines.append(f"- Files: {', '.join(f'`{entry.path}`' for entry in record.extras)}")
    lines.append(
        "- Recompute every table and verdict from the raw files: "
        f"`sparkgate verify experiments/{record.name}`"
    )
    if record.notes:
        lines += ["", "## Notes", "", record.notes]
    return lines


def _when(moment: Any) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment is not None else "not yet"
