"""Recompute a record from its raw files and list every way the record disagrees with them.

`verify` trusts nothing the record says about itself: each stage's result.json must still have
the SHA-256 taken when it was saved, each raw file it lists must exist unchanged, the summaries
must equal what the gates' own code computes again from the raw files (each gate's story's
`recompute`: benchmark arms, determinism responses, boot logs and timelines, JUnit XML), every
verdict must
follow from the figures (benchmark intervals, boot checks, determinism counts and hashes against
the previous record), the overall verdict must follow from the stages, and the README rendered
again from the raw results must equal the README on disk. An empty list means it verifies.
Every file the record names must lie inside its folder: an absolute entry, one that climbs out
with `..`, or one whose link leads out is refused by name before anything is read or hashed.
"""

from __future__ import annotations

import difflib
import functools
import json
from pathlib import Path
from typing import Any

from flows.errors import RecordError
from flows.fileio import sha256_file
from flows.gates.base import GateResult
from flows.gates.registry import REGISTRY
from flows.gates.story import RecordView
from flows.record import tables
from flows.record.decisions import acceptance_problems, needs_acceptance
from flows.record.legacy import upgrade_result
from flows.record.model import README_FILE, FileEntry, Record, StageEntry, verdict_passes
from flows.record.reader import list_records, read_record
from flows.record.readme import RENDER_VERSION, render_readme

_BASE_FIELDS = set(GateResult.model_fields)
PROMOTIONS_LOG = "promotions.jsonl"
"""The promotions log beside the records (experiments/promotions.jsonl): a promotion of an
inconclusive record must say who accepted it and why."""
INCONCLUSIVE = "inconclusive"


def verify(path: Path) -> list[str]:
    """Problems found recomputing the record in folder `path`; empty when it verifies."""
    try:
        record = read_record(path)
    except RecordError as error:
        return [str(error)]
    escaping = _escaping_entries(path, record)
    if escaping:
        return escaping
    problems: list[str] = []
    if record.status != "published":
        problems.append(f"{record.name}: not published (status {record.status})")
    stages: dict[str, StageEntry] = {}
    for stage, entry in record.stages.items():
        found, raw = _check_stage(path, entry)
        problems += found
        if raw is not None:
            stages[stage] = raw
    rebuilt = record.model_copy(update={"stages": stages})
    problems += _check_verdict(rebuilt)
    problems += _check_files(path, "extra file", record.extras)
    problems += _check_files(path, "plot", record.plots)
    problems += _check_documents(path, record)
    problems += _recomputed(path.parent, rebuilt)
    problems += _check_readme(path, rebuilt)
    problems += acceptance_problems(rebuilt, _promotions(path.parent / PROMOTIONS_LOG))
    return problems


def _promotions(log: Path) -> list[dict[str, Any]]:
    """The promotions log beside the records, each whole line as a JSON object (a torn line is
    the log's reader's concern, skipped here)."""
    if not log.is_file():
        return []
    found = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(entry, dict):
            found.append(entry)
    return found


def _escaping_entries(root: Path, record: Record) -> list[str]:
    """Every file entry of the record that names a path outside its folder, by owner and name."""
    named: list[tuple[str, str]] = [("document", name) for name in record.documents]
    for stage, entry in record.stages.items():
        named.append((stage, entry.result.path))
        named += [(stage, file.path) for file in entry.files]
        named += [(f"{stage} evidence", file.path) for file in entry.evidence_files]
    named += [("extra file", file.path) for file in record.extras]
    named += [("plot", file.path) for file in record.plots]
    if record.readme is not None:
        named.append((README_FILE, record.readme.path))
    inside = root.resolve()
    return [
        f"{owner}: {name!r} lies outside the record folder (refused, not read)"
        for owner, name in named
        if _outside(inside, name)
    ]


def _outside(inside: Path, name: str) -> bool:
    """`name` is absolute, or leads out of the folder `inside` (by `..` or a link)."""
    if Path(name).is_absolute():
        return True
    try:
        return not (inside / name).resolve().is_relative_to(inside)
    except (OSError, ValueError):  # a link loop, a NUL in the name
        return True


def _check_stage(root: Path, entry: StageEntry) -> tuple[list[str], StageEntry | None]:
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
    return problems, rebuilt


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


def _check_verdict(record: Record) -> list[str]:
    if record.status != "published":
        return []
    if needs_acceptance(record):  # no gate failed, one could not decide: a person decides
        if (record.verdict or "").startswith(INCONCLUSIVE):
            return []
        return [f"verdict {record.verdict!r}, but a gate was inconclusive and none failed"]
    failed = [s for s in record.stage_order if record.stages.get(s, None) is None] + [
        s for s, e in record.stages.items() if e.outcome == "failed"
    ]
    if verdict_passes(record.verdict) and failed:
        return [f"verdict {record.verdict!r}, but these gates failed or never ran: {failed}"]
    if not verdict_passes(record.verdict) and not failed and record.stages:
        return [f"verdict {record.verdict!r}, but every gate passed"]
    return []


def _recomputed(experiments: Path, record: Record) -> list[str]:
    """Every gate's summary against its raw files, read again by the gate's own story, in the
    registry's order; a stage compared with the previous release finds that record lazily."""
    problems: list[str] = []
    for gate in REGISTRY:
        stage = record.stages.get(gate.name)
        if stage is None:
            continue
        previous = functools.cache(lambda stage=stage: _previous_record(experiments, record, stage))
        problems += gate.story.recompute(record, stage, previous)
    return problems


def _previous_record(experiments: Path, record: Record, stage: StageEntry) -> RecordView | None:
    """The record compared with: named by folder, else the previous release's newest published
    record of the same cluster shape when the stage started (the one the gate read)."""
    if not record.previous:
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
