"""Render a record as its README.md: verdict first, then what changed, then every gate's tables.

Pure: a `Record` in, markdown out. `publish` writes its output and `verify` renders it again
from the raw stage files and compares, so every figure a reader sees in the README can be
traced back to a result.json. The layout follows the recipe's release notes: results tables
`workload | previous | candidate (change [interval])`, a boots table `boot | ready | what
happened`, the determinism scenarios, and the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flows.bench.stats import SlowerRule
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.gates.cold_boots.summary import ColdBootsSummary
from flows.gates.determinism.summary import DeterminismSummary
from flows.gates.release_tests.summary import ReleaseTestsSummary
from flows.record import tables
from flows.record.model import Record, StageEntry

# Bump whenever the README layout changes: verify re-renders only records of the same layout
# (older ones are still guarded by the README's SHA-256 taken at publish).
RENDER_VERSION = 1
TITLES = {
    "release_tests": "Release tests",
    "determinism": "Determinism",
    "cold_boots": "Cold boots",
    "benchmark": "Benchmark: candidate against previous",
}


def render_readme(record: Record) -> str:
    """The README of a record."""
    lines = [*_verdict(record), *_changes(record)]
    for stage in record.ordered_stages():
        entry = record.stages.get(stage)
        lines += ["", f"## {TITLES.get(stage, stage)}", ""]
        if entry is None:
            lines.append("Not run.")
            continue
        lines.append(f"**{entry.outcome}**: {entry.reason}")
        section = SECTIONS.get(stage)
        if (
            section is not None and entry.summary is not None
        ):  # a skipped or crashed gate has no figures
            try:
                lines += section(entry, record)
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
        (
            f"**Verdict: {verdict}.** Release `{record.release_name}` on cluster "
            f"`{record.cluster_name}`, build `{record.build_digest}`, record `{record.name}`."
        ),
        "",
    ]
    rows = []
    for stage in record.ordered_stages():
        entry = record.stages.get(stage)
        if entry is None:
            rows.append([stage, "not run", "", tables.DASH])
        else:
            rows.append(
                [
                    stage,
                    entry.outcome,
                    tables.headline(stage, entry.summary),
                    tables.number(entry.seconds, "s"),
                ]
            )
    return lines + tables.markdown_table(["gate", "outcome", "headline", "took"], rows)


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
    return lines


_SLOWER_MEANS = {
    SlowerRule.INTERVAL: "the whole interval beyond the tolerance",
    SlowerRule.SIGNIFICANT: "the whole interval on the bad side of no change and the change "
    "beyond the tolerance",
}
"""What a slower verdict meant, by the rule the record was decided by (older records keep
their words, so their README renders again byte for byte)."""


def _benchmark(entry: StageEntry, record: Record) -> list[str]:
    summary = entry.summary_as(BenchmarkSummary)
    if summary is None:
        return []
    tolerance = tables.tolerance_pct(summary.tolerance)
    lines = [
        "",
        (
            f"Arms in session order: {', '.join(summary.arms)}; tolerance "
            f"{tolerance:g}%. A change counts (bold) only when the verdict says so: faster "
            "(the whole 95% interval on the good side of no change) or slower "
            f"({_SLOWER_MEANS[summary.slower_rule]}); otherwise the point reads level or "
            "inconclusive."
        ),
        "",
        *tables.markdown_table(
            ["workload", "previous", "candidate (change [95% interval])", "verdict"],
            tables.bench_rows(summary),
        ),
    ]
    if summary.kv_capacity_tokens:
        lines += ["", tables.kv_capacity_line(summary.kv_capacity_tokens)]
    return lines + _plot(record, "benchmark")


def _cold_boots(entry: StageEntry, record: Record) -> list[str]:
    summary = entry.summary_as(ColdBootsSummary)
    if summary is None:
        return []
    return [
        "",
        *tables.markdown_table(["boot", "ready", "what happened"], tables.boot_rows(summary)),
        "",
        *tables.markdown_table(
            [
                "boot",
                "slowest preparation",
                "kernels",
                "liveness wait",
                "compiles after preparation",
                "spot check",
            ],
            tables.boot_detail_rows(summary),
        ),
        *_plot(record, "boots"),
    ]


def _determinism(entry: StageEntry, record: Record) -> list[str]:
    summary = entry.summary_as(DeterminismSummary)
    if summary is None:
        return []
    return [
        "",
        (
            f"{'?' if summary.prompts is None else summary.prompts} prompts; every scenario "
            "compared with the prompts "
            "served alone (tokens exactly, logprobs bit for bit)."
        ),
        "",
        *tables.markdown_table(
            ["scenario", "identical", "first difference"], tables.determinism_rows(summary)
        ),
        "",
        tables.against_previous_line(summary, record.previous),
    ]


def _release_tests(entry: StageEntry, record: Record) -> list[str]:
    del record
    summary = entry.summary_as(ReleaseTestsSummary)
    if summary is None:
        return []
    lines = ["", tables.tests_line(summary)]
    failing = tables.failing_test_files(summary)
    if failing:
        lines += [
            "",
            "Failing files:",
            "",
            *tables.markdown_table(["file", "outcome", "tests", "seconds"], failing),
        ]
    for names, title in (
        (summary.unclassified, "Unclassified files (each fails the stage until triaged)"),
        (summary.changed, "Files this release changes"),
    ):
        if names:
            lines += ["", f"{title}: " + ", ".join(f"`{name}`" for name in names)]
    excluded = tables.excluded_test_files(summary)
    if excluded:
        lines += ["", "Excluded files:", "", *tables.markdown_table(["file", "reason"], excluded)]
    return lines


SECTIONS: Mapping[str, Callable[[StageEntry, Record], list[str]]] = {
    "release_tests": _release_tests,
    "determinism": _determinism,
    "cold_boots": _cold_boots,
    "benchmark": _benchmark,
}


def _plot(record: Record, stem: str) -> list[str]:
    path = f"plots/{stem}.png"
    if any(plot.path == path for plot in record.plots):
        return ["", f"![{stem}]({path})"]
    return []


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
