"""Recompute a record from its raw files and list every way the record disagrees with them.

`verify` trusts nothing the record says about itself: each stage's result.json must still have
the SHA-256 taken when it was saved, each raw file it lists must exist unchanged, the summaries
must equal what the gates' own code computes again from the raw files (flows.record.recompute:
benchmark arms, determinism responses, boot logs and timelines, JUnit XML), every verdict must
follow from the figures (benchmark intervals, boot checks, determinism counts and hashes against
the previous record), the overall verdict must follow from the stages, and the README rendered
again from the raw results must equal the README on disk. An empty list means it verifies.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree  # only its ParseError; parsing is the gate's

from flows.errors import RecordError
from flows.gates.base import GateResult
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.gates.determinism.rules import PREVIOUS_FILE, hashes_digest
from flows.gates.determinism.summary import DeterminismSummary
from flows.gates.release_tests.rules import parse_junit
from flows.gates.release_tests.summary import FileRow, ReleaseTestsSummary
from flows.record import tables
from flows.record.atomic import sha256_file
from flows.record.legacy import upgrade_result
from flows.record.model import README_FILE, FileEntry, Record, StageEntry, verdict_passes
from flows.record.reader import list_records, read_record, record_hashes, saved_json
from flows.record.readme import RENDER_VERSION, render_readme
from flows.record.recompute import (
    benchmark_problems,
    cold_boots_problems,
    determinism_problems,
)

_BASE_FIELDS = set(GateResult.model_fields)


def verify(path: Path) -> list[str]:
    """Problems found recomputing the record in folder `path`; empty when it verifies."""
    try:
        record = read_record(path)
    except RecordError as error:
        return [str(error)]
    problems: list[str] = []
    if record.status != "published":
        problems.append(f"{record.name}: not published (status {record.status})")
    stages: dict[str, StageEntry] = {}
    for stage, entry in record.stages.items():
        found, raw = _check_stage(path, entry, _max_arms(record))
        problems += found
        if raw is not None:
            stages[stage] = raw
    rebuilt = record.model_copy(update={"stages": stages})
    problems += _check_verdict(rebuilt)
    problems += _check_files(path, "extra file", record.extras)
    problems += _check_files(path, "plot", record.plots)
    problems += _check_documents(path, record)
    problems += _check_previous(path.parent, rebuilt)
    problems += _check_determinism(path.parent, rebuilt)
    boots = rebuilt.stages.get("cold_boots")
    if boots is not None:
        problems += cold_boots_problems(rebuilt, boots)
    problems += _check_readme(path, rebuilt)
    return problems


def _check_stage(
    root: Path, entry: StageEntry, max_arms: int
) -> tuple[list[str], StageEntry | None]:
    """Problems of one stage, and its entry rebuilt from result.json (None if unreadable)."""
    stage = entry.stage
    file = root / entry.result.path
    if not file.is_file():
        return [f"{stage}: {entry.result.path} is missing"], None
    problems: list[str] = []
    if sha256_file(file) != entry.result.sha256:
        problems.append(f"{stage}: {entry.result.path} was edited after it was saved")
    try:
        data = upgrade_result(json.loads(file.read_text(encoding="utf-8")))
        if not isinstance(data, dict):
            raise ValueError(f"a JSON object was expected, not {type(data).__name__}")
        raw = GateResult.model_validate({k: v for k, v in data.items() if k in _BASE_FIELDS})
    except (ValueError, RecursionError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        return [*problems, f"{stage}: {entry.result.path} unreadable: {first}"], None
    summary = raw.summary
    rebuilt = entry.model_copy(
        update={
            "outcome": raw.outcome.value,
            "reason": raw.reason,
            "started_at": raw.started_at,
            "seconds": raw.seconds,
            "summary": summary,
        }
    )
    for field in ("outcome", "reason", "seconds", "summary"):
        if getattr(rebuilt, field) != getattr(entry, field):
            problems.append(f"{stage}: record.json's {field} differs from {entry.result.path}")
    problems += _check_files(root, stage, entry.files)
    problems += _check_files(root, f"{stage} evidence", entry.evidence_files)
    problems += [
        f"{stage}: evidence folder {item} is missing"
        for item in entry.evidence
        if not (root / item).exists() and not Path(item).exists()
    ]
    problems += tables.summary_problems(stage, summary, rebuilt.outcome)
    if isinstance(summary, ReleaseTestsSummary):
        problems += _check_junit(root, entry.files, summary)
    if isinstance(summary, BenchmarkSummary) and rebuilt.outcome != "skipped":
        problems += benchmark_problems(root / stage, summary, max_arms)
    return problems, rebuilt


def _max_arms(record: Record) -> int:
    """The benchmark's arm limit from the resolved release (the decision depends on it)."""
    gates = record.release.get("gates") or {}
    value = (gates.get("benchmark") or {}).get("max_arms", 7)
    return int(value) if isinstance(value, int) else 7


def _check_files(root: Path, owner: str, entries: list[FileEntry]) -> list[str]:
    problems = []
    for entry in entries:
        file = root / entry.path
        if not file.is_file():
            problems.append(f"{owner}: {entry.path} is missing")
        elif sha256_file(file) != entry.sha256:
            problems.append(f"{owner}: {entry.path} changed since it was saved (SHA-256)")
    return problems


def _check_documents(root: Path, record: Record) -> list[str]:
    problems = []
    for name, data in record.documents.items():
        file = root / name
        if not file.is_file():
            continue
        try:
            kept = json.loads(file.read_text(encoding="utf-8"))
        except (ValueError, RecursionError):
            problems.append(f"{name}: not readable JSON (its copy in record.json differs)")
            continue
        if kept != data:
            problems.append(f"{name}: differs from its copy in record.json")
    return problems


def _check_junit(root: Path, files: list[FileEntry], summary: ReleaseTestsSummary) -> list[str]:
    """Recount every file's tests from the kept JUnit XML with the gate's own parser."""
    reports = [root / f.path for f in files if f.path.endswith(".xml")]
    listed = [f.file for f in summary.files]
    if not reports or not listed or not reports[0].is_file():
        return []
    try:
        outcomes = parse_junit(reports[0].read_text(encoding="utf-8"), listed)
    except (ValueError, RecursionError, ElementTree.ParseError) as error:
        return [f"release_tests: {reports[0].name} is not valid JUnit XML: {error}"]
    counts = {key: sum(int(getattr(o, key)) for o in outcomes) for key in tables.TEST_COUNTS}
    problems = tables.junit_problems(summary, counts)
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


def _check_verdict(record: Record) -> list[str]:
    if record.status != "published":
        return []
    failed = [s for s in record.stage_order if record.stages.get(s, None) is None] + [
        s for s, e in record.stages.items() if e.outcome == "failed"
    ]
    if verdict_passes(record.verdict) and failed:
        return [f"verdict {record.verdict!r}, but these gates failed or never ran: {failed}"]
    if not verdict_passes(record.verdict) and not failed and record.stages:
        return [f"verdict {record.verdict!r}, but every gate passed"]
    return []


def _compared_hashes(
    experiments: Path, record: Record
) -> tuple[Record | None, dict[str, Any] | None, list[str]]:
    """The hashes the determinism gate compared against, and problems finding them.

    The record keeps a copy (determinism/previous-hashes.json), so a record copied on its own
    still verifies; when the previous record is beside it too, both must agree.
    """
    stage = record.stages.get("determinism")
    summary = stage.summary_as(DeterminismSummary) if stage is not None else None
    against = summary.against_previous if summary is not None else None
    if against is None or against.mode not in ("unchanged", "changed"):
        return None, None, []
    previous = _previous_record(experiments, record, stage)
    copy = saved_json(record, f"determinism/{PREVIOUS_FILE}")
    kept = copy.get("hashes") if isinstance(copy, dict) else None
    if previous is None and kept is None:
        missing = (
            f"determinism: the previous release's record ({record.previous}) is not beside "
            "this record and the record keeps no copy of the hashes it compared against, so "
            "against_previous cannot be checked: copy that record into the same folder"
        )
        return None, None, [missing]
    if previous is None:
        return None, kept, []
    theirs = record_hashes(previous)
    if kept is None:
        return previous, theirs, []
    if theirs is None or hashes_digest(theirs) != copy.get("sha256"):
        changed = (
            f"determinism: the previous record {previous.name} has changed since this record "
            "was compared against it (its hashes no longer match the copy kept here, "
            f"{str(copy.get('sha256'))[:12]})"
        )
        return previous, kept, [changed]
    return previous, kept, []


def _check_previous(experiments: Path, record: Record) -> list[str]:
    """Recount identical responses against the hashes the gate compared with."""
    stage = record.stages.get("determinism")
    summary = stage.summary_as(DeterminismSummary) if stage is not None else None
    previous, theirs, problems = _compared_hashes(experiments, record)
    if summary is None or theirs is None:
        return problems
    against = summary.against_previous
    if against is None:
        return problems
    identical, total = tables.hash_matches(summary.hash_table(), theirs)
    if (identical, total) != (against.identical, against.total):
        source = previous.name if previous is not None else "the copy kept in this record"
        problems.append(
            f"determinism: against previous says {against.identical}/"
            f"{against.total} identical, the hashes of {source} give {identical}/{total}"
        )
    return problems


def _check_determinism(experiments: Path, record: Record) -> list[str]:
    stage = record.stages.get("determinism")
    if stage is None or stage.outcome == "skipped":
        return []
    previous, hashes, _problems = _compared_hashes(experiments, record)  # reported by the above
    if previous is None and hashes is None:
        previous = _previous_record(experiments, record, stage)
        hashes = record_hashes(previous) if previous is not None else None
    return determinism_problems(record, stage, previous, hashes)


def _previous_record(experiments: Path, record: Record, stage: StageEntry | None) -> Record | None:
    """The record compared with: named by folder, else the previous release's newest published
    record of the same cluster shape when the determinism stage started (the one the gate read)."""
    if not record.previous or stage is None:
        return None
    folder = experiments / record.previous
    if (folder / "record.json").is_file():
        try:
            return read_record(folder)
        except RecordError:
            return None
    earlier = [
        r
        for r in list_records(experiments)
        if r.release_name == record.previous
        and r.shape == record.shape
        and r.status == "published"
        and r.published_at is not None
        and r.published_at <= stage.started_at
    ]
    return earlier[-1] if earlier else None


def _check_readme(root: Path, record: Record) -> list[str]:
    file = root / README_FILE
    if not file.is_file():
        return [f"{README_FILE} is missing"]
    problems = []
    if record.readme is not None and sha256_file(file) != record.readme.sha256:
        problems.append(f"{README_FILE} was edited after it was published (SHA-256)")
    if record.render_version != RENDER_VERSION:
        return problems  # another (or an unrecorded) layout: only the hash can be checked
    expected, actual = render_readme(record), file.read_text()
    if expected == actual:
        return problems
    diff = [
        line
        for line in difflib.unified_diff(
            expected.splitlines(), actual.splitlines(), "recomputed", README_FILE, n=0, lineterm=""
        )
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    shown = "\n  ".join(diff[:8])
    return [
        *problems,
        f"{README_FILE} differs from the README recomputed from the raw files:\n  {shown}",
    ]
