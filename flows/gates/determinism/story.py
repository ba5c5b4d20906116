"""The determinism gate in a record: the scenarios table, the comparison with the previous release,
its headline and checks, the compare rows, and the hashes a later release compares with.

Pure text from the typed summary, except `recompute` (flows.gates.determinism.recompute: the
comparison with the previous release recounted, the raw responses judged again).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from flows.gates.determinism.recompute import determinism_recomputed
from flows.gates.determinism.summary import DeterminismSummary, ScenarioRow
from flows.gates.markdown import DASH, Row, markdown_table
from flows.gates.story import Earlier, PlainStory, RecordView, Section, StageView, side_by_side


def determinism_rows(summary: DeterminismSummary) -> list[Row]:
    """scenario | identical | first difference."""
    rows: list[Row] = []
    for scenario in summary.scenarios:
        first = scenario.first_difference
        where = f"prompt {first.prompt}, token {first.index}" if first is not None else DASH
        total = scenario.identical + scenario.differing
        rows.append([scenario.name, f"{scenario.identical}/{total}", where])
    return rows


def against_previous_line(summary: DeterminismSummary, previous: str | None) -> str:
    """One sentence on how the outputs compare with the previous release."""
    against = summary.against_previous
    if against is None:
        return "No comparison with a previous release: none."
    name = previous or "the previous release"
    if against.mode == "unchanged":
        return (
            f"Against {name} (outputs declared unchanged): {against.identical}/{against.total} "
            "responses identical, tokens and logprobs."
        )
    if against.mode == "changed":
        agreement = against.top_token_agreement
        share = f"{agreement * 100:.1f}%" if agreement is not None else DASH
        return (
            f"Against {name} (outputs declared changed): {against.identical}/{against.total} "
            f"responses identical, top-token agreement {share}; {against.reason}"
        )
    return f"No comparison with a previous release: {against.reason}."


def determinism_headline(summary: DeterminismSummary) -> str:
    """e.g. `6/6 scenarios identical; vs previous 9/9`."""
    scenarios = summary.scenarios
    clean = sum(1 for s in scenarios if not s.differing)
    text = f"{clean}/{len(scenarios)} scenarios identical"
    against = summary.against_previous
    if against is not None and against.mode in ("unchanged", "changed"):
        text += f"; vs previous {against.identical}/{against.total}"
    return text


def determinism_problems(summary: DeterminismSummary, outcome: str) -> list[str]:
    """Scenarios that contradict themselves, and a pass that the figures do not allow."""
    problems: list[str] = []
    for scenario in summary.scenarios:
        name, differing = scenario.name, scenario.differing
        if bool(differing) != (scenario.first_difference is not None):
            problems.append(f"determinism: {name}: differing and first difference disagree")
        if differing and outcome == "passed":
            problems.append(f"determinism: outcome passed, but {name} has {differing} differing")
    against = summary.against_previous
    if (
        against is not None
        and against.mode == "unchanged"
        and against.identical != against.total
        and outcome == "passed"
    ):
        problems.append("determinism: outcome passed, but outputs differ from the previous")
    return problems


def section(summary: DeterminismSummary, previous: str | None) -> list[str]:
    """The README section: the scenarios table and the comparison with the previous release."""
    return [
        "",
        (
            f"{'?' if summary.prompts is None else summary.prompts} prompts; every scenario "
            "compared with the prompts "
            "served alone (tokens exactly, logprobs bit for bit)."
        ),
        "",
        *markdown_table(["scenario", "identical", "first difference"], determinism_rows(summary)),
        "",
        against_previous_line(summary, previous),
    ]


def _scenarios(record: RecordView) -> dict[str, ScenarioRow]:
    summary = record.summary_of(DeterminismSummary)
    return {s.name: s for s in (summary.scenarios if summary is not None else [])}


def _scenario(scenario: ScenarioRow | None) -> str:
    if scenario is None:
        return DASH
    return f"{scenario.identical}/{scenario.identical + scenario.differing}"


def compare(first: RecordView, second: RecordView) -> Section:
    """Each scenario's identical responses in both records."""
    return side_by_side(
        "determinism: identical responses", "scenario", (first, second), _scenarios, _scenario
    )


@dataclass(frozen=True)
class DeterminismStory(PlainStory):
    """The determinism gate as the record tells it."""

    heading: str = "Determinism"
    short: str = "determ."

    def headline(self, summary: BaseModel) -> str:
        """e.g. `6/6 scenarios identical; vs previous 9/9`."""
        return determinism_headline(summary) if isinstance(summary, DeterminismSummary) else ""

    def problems(self, summary: BaseModel, outcome: str) -> list[str]:
        """Scenarios that contradict themselves, a pass the figures do not allow."""
        if not isinstance(summary, DeterminismSummary):
            return []
        return determinism_problems(summary, outcome)

    def section(self, summary: BaseModel, record: RecordView) -> list[str]:
        """The scenarios and the comparison with the previous release."""
        if not isinstance(summary, DeterminismSummary):
            return []
        return section(summary, record.previous)

    def compare(self, first: RecordView, second: RecordView) -> Section | None:
        """Identical responses per scenario."""
        return compare(first, second)

    def recompute(self, record: RecordView, stage: StageView, previous: Earlier) -> list[str]:
        """The comparison with the previous recounted, the raw responses judged again."""
        return determinism_recomputed(record, stage, previous)


DETERMINISM_STORY = DeterminismStory()
