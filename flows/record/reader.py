"""Read records back: one record, all records, the latest of a release, an unfinished build.

Readers never write. A folder without record.json is not a record; a record.json that does not
parse is a RecordError naming the file, so a damaged record is never silently skipped by the
flow that needs it (listing for people skips it and says so).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flows.errors import RecordError
from flows.record.legacy import upgrade_record
from flows.record.model import RECORD_FILE, Record


def read_record(path: Path) -> Record:
    """The record in folder `path` (or `path` itself when it is a record.json)."""
    file = path if path.name == RECORD_FILE else path / RECORD_FILE
    if not file.is_file():
        raise RecordError(f"{file}: no such record (missing {RECORD_FILE})")
    try:
        data = upgrade_record(json.loads(file.read_text(encoding="utf-8")))
        if not isinstance(data, dict):
            raise ValueError(f"a JSON object was expected, not {type(data).__name__}")
        return Record.model_validate(data).located(file.parent)
    except (ValidationError, ValueError, RecursionError) as error:
        first = (str(error).splitlines() or [type(error).__name__])[0]
        raise RecordError(f"{file}: not a valid record: {first}") from error
    except OSError as error:
        raise RecordError(f"{file}: cannot read: {error.strerror}") from error


def list_records(experiments: Path) -> list[Record]:
    """Every readable record under `experiments`, oldest first (damaged ones are skipped)."""
    found: list[Record] = []
    if not experiments.is_dir():
        return found
    for folder in sorted(experiments.iterdir()):
        if not (folder / RECORD_FILE).is_file():
            continue
        try:
            found.append(read_record(folder))
        except RecordError:
            continue
    return sorted(found, key=lambda record: (record.created_at, record.name))


def broken_records(experiments: Path) -> list[str]:
    """Messages for folders whose record.json cannot be read (for listings to show)."""
    problems: list[str] = []
    if not experiments.is_dir():
        return problems
    for folder in sorted(experiments.iterdir()):
        if (folder / RECORD_FILE).is_file():
            try:
                read_record(folder)
            except RecordError as error:
                problems.append(str(error))
    return problems


def latest_record(
    experiments: Path,
    release_name: str,
    *,
    published_only: bool = True,
    shape: str | None = None,
) -> Record | None:
    """The newest record of a release (published ones only, unless told otherwise).

    With `shape`, only records of that cluster shape count: outputs and speed differ between a
    TP3 triangle and a TP4 ring, so a release is compared and promoted per shape.
    """
    candidates = [
        record
        for record in list_records(experiments)
        if record.release_name == release_name
        and (record.status == "published" or not published_only)
        and (shape is None or record.shape == shape)
    ]
    return candidates[-1] if candidates else None


def published_shapes(experiments: Path, release_name: str) -> list[str]:
    """The cluster shapes a release has published records on (for "qualify it on X first")."""
    return sorted(
        {
            record.shape or "an unknown shape"
            for record in list_records(experiments)
            if record.release_name == release_name and record.status == "published"
        }
    )


def unfinished_build(experiments: Path, release_name: str, cluster_name: str) -> Any:
    """The build.json of the newest unpublished record of a release on a cluster (or None).

    A resumed qualification continues that record, so it must boot the build that record
    started with, not make another one.
    """
    unfinished = [
        record
        for record in list_records(experiments)
        if record.status == "in-progress"
        and record.release_name == release_name
        and record.cluster_name == cluster_name
    ]
    newest = max(unfinished, key=lambda record: record.updated_at, default=None)
    return newest.documents.get("build.json") if newest is not None else None


def find_record(experiments: Path, ref: str) -> Path:
    """A record folder from what a person types: a path, a folder name, or a release name."""
    given = Path(ref)
    for candidate in (given, experiments / ref):
        if (candidate / RECORD_FILE).is_file() or (
            candidate.name == RECORD_FILE and candidate.is_file()
        ):
            return candidate if candidate.is_dir() else candidate.parent
    latest = latest_record(experiments, ref, published_only=False)
    if latest is not None:
        return experiments / latest.name
    raise RecordError(f"{ref}: no record by that path, folder name or release in {experiments}")
