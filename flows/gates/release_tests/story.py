"""The release-tests gate in a record: the counts line, failing and excluded files, the JUnit check.

Pure text from the typed summary, except `recompute`, which recounts every file's tests from the
kept JUnit XML with the gate's own parser.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from xml.etree import ElementTree  # only its ParseError; parsing is the gate's

from pydantic import BaseModel

from flows.gates.markdown import Row, markdown_table, number
from flows.gates.release_tests.rules import parse_junit
from flows.gates.release_tests.summary import FileRow, ReleaseTestsSummary
from flows.gates.story import Earlier, FileView, PlainStory, RecordView, StageView

TEST_COUNTS = ("passed", "failed", "errors", "skipped")


def tests_line(summary: ReleaseTestsSummary) -> str:
    """e.g. `41 passed, 0 failed, 0 errors, 2 skipped in 12.3 s on spark1` (or `... on spark1 in
    record <name>` when the stage took that record's run)."""
    counts = ", ".join(f"{summary.count(key)} {key}" for key in TEST_COUNTS)
    if summary.reused_from is not None:  # this stage ran nothing: its seconds time no test
        return f"{counts} on {summary.node} in record {summary.reused_from}"
    return f"{counts} in {number(summary.seconds, 's')} on {summary.node}"


def failing_test_files(summary: ReleaseTestsSummary) -> list[Row]:
    """file | outcome | tests | seconds, for every file that did not pass."""
    return [
        [f.file, f.outcome, str(f.tests), number(f.seconds)]
        for f in summary.files
        if f.outcome not in ("passed", "skipped")
    ]


def excluded_test_files(summary: ReleaseTestsSummary) -> list[Row]:
    """file | reason, for every file the classification excludes."""
    return [[e.file, e.reason] for e in summary.excluded]


def tests_headline(summary: ReleaseTestsSummary) -> str:
    """e.g. `41 passed, 0 failed`."""
    text = f"{summary.passed} passed, {summary.failed} failed"
    if summary.errors:
        text += f", {summary.errors} errors"
    return text


def tests_problems(summary: ReleaseTestsSummary, outcome: str) -> list[str]:
    """A pass with failing tests, or per-file test counts that do not add up to the totals."""
    problems: list[str] = []
    if outcome == "passed" and (summary.failed or summary.errors):
        problems.append("release_tests: outcome passed, but tests failed or errored")
    counted = sum(f.tests for f in summary.files)
    total = sum(summary.count(key) for key in TEST_COUNTS)
    if summary.files and counted != total:
        problems.append(f"release_tests: files hold {counted} tests, the counts add to {total}")
    return problems


def junit_problems(summary: ReleaseTestsSummary, counts: Mapping[str, int]) -> list[str]:
    """Counts in the summary that differ from those recomputed from the JUnit XML."""
    return [
        f"release_tests: {key} is {summary.count(key)} but the JUnit XML says {counts[key]}"
        for key in TEST_COUNTS
        if summary.count(key) != counts[key]
    ]


def section(summary: ReleaseTestsSummary) -> list[str]:
    """The README section: the counts, failing files, unclassified and changed, excluded."""
    lines = ["", tests_line(summary)]
    if summary.reused_from is not None:
        reused = (
            "Not run again: the same run (same build, gate files, options and node) passed in "
            f"record `{summary.reused_from}`; its JUnit XML and pytest output are kept here and "
            "counted again."
        )
        lines += ["", reused]
    failing = failing_test_files(summary)
    if failing:
        lines += [
            "",
            "Failing files:",
            "",
            *markdown_table(["file", "outcome", "tests", "seconds"], failing),
        ]
    for names, title in (
        (summary.unclassified, "Unclassified files (each fails the stage until triaged)"),
        (summary.changed, "Files this release changes"),
    ):
        if names:
            lines += ["", f"{title}: " + ", ".join(f"`{name}`" for name in names)]
    excluded = excluded_test_files(summary)
    if excluded:
        lines += ["", "Excluded files:", "", *markdown_table(["file", "reason"], excluded)]
    return lines


def junit_recount(
    record: RecordView, files: Sequence[FileView], summary: ReleaseTestsSummary
) -> list[str]:
    """Recount every file's tests from the kept JUnit XML with the gate's own parser."""
    if record.folder is None:
        return []
    reports = [record.folder / f.path for f in files if f.path.endswith(".xml")]
    listed = [f.file for f in summary.files]
    if not reports or not listed or not reports[0].is_file():
        return []
    try:
        outcomes = parse_junit(reports[0].read_text(encoding="utf-8"), listed)
    except (ValueError, RecursionError, ElementTree.ParseError) as error:
        return [f"release_tests: {reports[0].name} is not valid JUnit XML: {error}"]
    counts = {key: sum(int(getattr(o, key)) for o in outcomes) for key in TEST_COUNTS}
    problems = junit_problems(summary, counts)
    recomputed = [
        FileRow(file=o.file, outcome=o.outcome, tests=o.tests, seconds=o.seconds) for o in outcomes
    ]
    for kept, again in zip(summary.files, recomputed, strict=False):
        if kept != again:
            problems.append(
                f"release_tests: {again.file}: summary {kept.model_dump()}, "
                f"JUnit XML {again.model_dump()}"
            )
    return problems


@dataclass(frozen=True)
class ReleaseTestsStory(PlainStory):
    """The release-tests gate as the record tells it."""

    heading: str = "Release tests"
    short: str = "tests"

    def headline(self, summary: BaseModel) -> str:
        """e.g. `41 passed, 0 failed`."""
        return tests_headline(summary) if isinstance(summary, ReleaseTestsSummary) else ""

    def problems(self, summary: BaseModel, outcome: str) -> list[str]:
        """A pass with failing tests, or counts that do not add up."""
        if not isinstance(summary, ReleaseTestsSummary):
            return []
        return tests_problems(summary, outcome)

    def section(self, summary: BaseModel, record: RecordView) -> list[str]:
        """The counts line and the files worth naming."""
        del record
        return section(summary) if isinstance(summary, ReleaseTestsSummary) else []

    def recompute(self, record: RecordView, stage: StageView, previous: Earlier) -> list[str]:
        """The JUnit XML counted again."""
        del previous
        summary = stage.summary
        if not isinstance(summary, ReleaseTestsSummary):
            return []
        return junit_recount(record, stage.files, summary)


RELEASE_TESTS_STORY = ReleaseTestsStory()
