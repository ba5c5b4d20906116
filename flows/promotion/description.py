"""What the approval form shows above its fields, made from the record it shows.

The verdict and each gate's outcome, the benchmark's decision with its largest gated changes and
their intervals (the rows `records --brief` names), and where the record is, so the decision can
be made from the form alone. The record described here is the record an approval promotes.
"""

from __future__ import annotations

from flows.gates.benchmark.story import bench_headline, headline_changes
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.gates.registry import GATES
from flows.record.decisions import needs_acceptance
from flows.record.model import Record


def decision_description(release: str, record: Record | None, path: str) -> str:
    """The markdown shown above the UI's resume form (the path only without a readable record)."""
    lines = [f"### Promote {release}?", ""]
    if record is not None:
        against = f" against {record.previous}" if record.previous else ""
        lines.append(f"- **Verdict:** {record.verdict or record.status}{against}")
        gates = [f"{gate} {record.stages[gate].outcome}" for gate in GATES if gate in record.stages]
        if gates:
            lines.append(f"- **Gates:** {', '.join(gates)}")
        lines.extend(_benchmark_lines(record))
    lines += [f"- **Record:** `{path}`", ""]
    lines.append(f"Approve to promote it (`sparkgate approve {release}`), or reject with a reason.")
    if record is not None and needs_acceptance(record):
        lines += ["", inconclusive_note(release)]
    return "\n".join(lines)


def inconclusive_note(release: str) -> str:
    """What the form adds when the benchmark could not decide: approving needs a reason."""
    return (
        "**The benchmark was inconclusive**: its noise allowed no decision, so it is never "
        "promoted by itself. Approving needs your reason for accepting that in "
        f'**accept_inconclusive** (`sparkgate approve {release} --accept-inconclusive "REASON"`); '
        "the promotions log keeps it with your name."
    )


def _benchmark_lines(record: Record) -> list[str]:
    stage = record.stages.get("benchmark")
    if stage is None:
        return []
    summary = stage.summary_as(BenchmarkSummary)
    if summary is None or not summary.decision:
        reason = f" ({stage.reason})" if stage.reason else ""
        return [f"- **Benchmark:** {stage.outcome}{reason}"]
    arms = f"{len(summary.arms)} arms ({', '.join(summary.arms)})"
    lines = [f"- **Benchmark:** {summary.decision} after {arms}; {bench_headline(summary)}"]
    changes = headline_changes(summary)
    if changes:
        lines.append("- **Largest gated changes** [95% interval]:")
        lines.extend(f"  - {change}" for change in changes)
    return lines
