"""A record's release-tests run as a later release may take it: its key and its raw files.

Releases that change only what the ranks are started with (an engine option, a description)
run the very same tests in the very same build as the release before them. Every record's
release-tests stage keeps the key of what decided its run (`rules.run_key`); a passing run whose
raw files are still as saved can stand for a new run with that key.
"""

from __future__ import annotations

from pathlib import Path

from flows.fileio import sha256_file
from flows.gates.base import EarlierTestRun
from flows.gates.release_tests.rules import NAME
from flows.gates.release_tests.summary import ReleaseTestsSummary
from flows.gates.story import RecordView

# What a reusing stage copies: the results and pytest's own words, never another stage's state.
RAW_FILES = ("junit.xml", "pytest.txt")


def passed_run(record: RecordView) -> EarlierTestRun | None:
    """The record's release-tests run when it passed, has a key and its files are as saved."""
    stage = record.stages.get(NAME)
    if stage is None or stage.outcome != "passed" or record.folder is None:
        return None
    summary = stage.summary
    if not isinstance(summary, ReleaseTestsSummary) or summary.run_key is None:
        return None
    files: dict[str, Path] = {}
    for entry in stage.files:
        name = Path(entry.path).name
        if name not in RAW_FILES:
            continue
        path = record.folder / entry.path
        if not path.is_file() or sha256_file(path) != entry.sha256:
            return None  # edited since it was saved: nothing in it can stand for a run
        files[name] = path
    if "junit.xml" not in files:
        return None
    return EarlierTestRun(record=record.name, run_key=summary.run_key, files=files)
