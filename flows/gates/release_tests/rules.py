"""The release-tests gate's rules: select and classify candidates, read JUnit XML, decide (pure).

Candidates are the files of the test tree as built for the release that the classification's
patterns select, plus the files the release itself changes; each must be classified `gate` or
`excluded` with a reason, and an unclassified file fails the gate by name. Kept apart from the
node I/O so every rule is unit tested without a node and `verify` recounts with the same parser.
"""

from __future__ import annotations

import hashlib
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from flows.gates.release_tests.summary import Excluded, FileRow, ReleaseTestsSummary
from flows.spec.release_tests import ReleaseTests

if TYPE_CHECKING:
    from flows.gates.base import EarlierTestRun

NAME = "release_tests"
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Selection(BaseModel):
    """What the selection step decided for every candidate file."""

    model_config = _FROZEN

    candidates: list[str] = Field(
        description="Files the patterns select, plus changed files and patched test files."
    )
    changed: list[str] = Field(description="Files the release lays over the built tree.")
    gate: list[str] = Field(description="Candidate files classified gate: these run.")
    excluded: list[Excluded] = Field(description="Candidate files excluded, with reasons.")
    unclassified: list[str] = Field(description="Candidate files nobody classified: each fails.")
    missing: list[str] = Field(description="Files classified gate that the tree lacks.")


class FileOutcome(BaseModel):
    """One gate file's result from the JUnit XML."""

    model_config = _FROZEN

    file: str
    outcome: str = Field(description="passed, failed, error, skipped or not-run.")
    tests: int
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    seconds: float = 0.0
    failures: list[str] = Field(default=[], description="Names of failed or erroring tests.")


def select(
    tree: Iterable[str],
    classification: ReleaseTests,
    changed: Iterable[str] = (),
    patched: Iterable[str] = (),
) -> Selection:
    """Candidates are the tree's files the patterns select, the changed files and the test files
    the patch series adds or changes; classify each."""
    files = set(tree)
    changed_set = sorted(set(changed))
    selected = {name for name in files if classification.selects(name)}
    candidates = sorted(selected | set(changed_set) | set(patched))
    gate, excluded, unclassified = [], [], []
    for name in candidates:
        entry = classification.files.get(name)
        if entry is None:
            unclassified.append(name)
        elif entry.gate:
            gate.append(name)
        else:
            excluded.append(Excluded(file=name, reason=(entry.reason or "").strip()))
    present = files | set(changed_set)
    missing = [name for name in classification.gate_files() if name not in present]
    return Selection(
        candidates=candidates,
        changed=changed_set,
        gate=gate,
        excluded=excluded,
        unclassified=unclassified,
        missing=missing,
    )


def _testcase_file(case: ET.Element, gate_files: Sequence[str]) -> str | None:
    """The gate file a testcase belongs to (xunit1 `file`, else from its dotted class name)."""
    named = case.get("file")
    if named:
        posix = PurePosixPath(named).as_posix()
        for name in gate_files:  # relative to pytest's rootdir, which may sit above or below
            if posix == name or name.endswith("/" + posix) or posix.endswith("/" + name):
                return name
        return posix
    dotted = (case.get("classname") or case.get("name") or "").replace(".", "/")
    for name in gate_files:
        stem = name.removesuffix(".py")
        if dotted == stem or dotted.startswith(stem + "/") or stem.endswith("/" + dotted):
            return name
        if PurePosixPath(stem).name in dotted.split("/"):
            return name
    return None


def parse_junit(text: str, gate_files: Sequence[str]) -> list[FileOutcome]:
    """Per-file counts and outcome from pytest's JUnit XML; a gate file without tests is not-run.

    Raises:
        ValueError: if the text is not JUnit XML.
    """
    root = ET.fromstring(text)  # noqa: S314 - written by pytest on our node
    if root.tag not in ("testsuites", "testsuite"):
        raise ValueError(f"not JUnit XML (root element {root.tag!r})")
    counts: dict[str, dict[str, float]] = {name: {} for name in gate_files}
    failures: dict[str, list[str]] = {name: [] for name in gate_files}
    stray: list[str] = []
    for case in root.iter("testcase"):
        name = _testcase_file(case, gate_files)
        label = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
        if name not in counts:
            stray.append(label)
            continue
        kind = _case_kind(case)
        tally = counts[name]
        tally[kind] = tally.get(kind, 0) + 1
        tally["seconds"] = tally.get("seconds", 0.0) + float(case.get("time") or 0.0)
        if kind in ("failed", "errors"):
            failures[name].append(case.get("name", label))
    if stray and gate_files:  # e.g. a collection error reported without a file: blame them all
        for name in gate_files:
            if not counts[name]:
                counts[name]["errors"] = 1
                failures[name].extend(stray)
    return [_file_outcome(name, counts[name], failures[name]) for name in gate_files]


def _case_kind(case: ET.Element) -> str:
    if case.find("error") is not None:
        return "errors"
    if case.find("failure") is not None:
        return "failed"
    if case.find("skipped") is not None:
        return "skipped"
    return "passed"


def _file_outcome(name: str, tally: Mapping[str, float], failures: list[str]) -> FileOutcome:
    passed, failed = int(tally.get("passed", 0)), int(tally.get("failed", 0))
    errors, skipped = int(tally.get("errors", 0)), int(tally.get("skipped", 0))
    tests = passed + failed + errors + skipped
    if errors:
        outcome = "error"
    elif failed:
        outcome = "failed"
    elif passed:
        outcome = "passed"
    elif skipped:
        outcome = "skipped"
    else:
        outcome = "not-run"
    return FileOutcome(
        file=name, outcome=outcome, tests=tests, passed=passed, failed=failed, errors=errors,
        skipped=skipped, seconds=round(float(tally.get("seconds", 0.0)), 3), failures=failures,
    )  # fmt: skip


def verdict(selection: Selection, files: Sequence[FileOutcome], pytest_rc: int) -> tuple[bool, str]:
    """Pass only when every candidate is classified and every gate file ran and passed."""
    if selection.unclassified:
        return False, (
            f"unclassified test file(s): {', '.join(selection.unclassified)}; classify each as "
            "gate or excluded (with a reason) in the release-tests file"
        )
    if selection.missing:
        return False, f"classified gate but not in the built tree: {', '.join(selection.missing)}"
    if not selection.gate:
        return False, "no gate files selected: nothing would prove this release"
    bad = [f for f in files if f.outcome in ("failed", "error", "not-run")]
    if bad:
        shown = "; ".join(
            f"{f.file} {f.outcome}" + (f" ({', '.join(f.failures[:3])})" if f.failures else "")
            for f in bad
        )
        return False, f"release tests failed: {shown}"
    if pytest_rc != 0:
        return False, f"pytest exited {pytest_rc} although every file reported success"
    tests = sum(f.tests for f in files)
    return True, f"{tests} tests in {len(files)} gate files passed"


def summary(
    selection: Selection, files: Sequence[FileOutcome], seconds: float, node: str
) -> ReleaseTestsSummary:
    """The summary the record renders (plus what was unclassified or changed)."""
    return ReleaseTestsSummary(
        passed=sum(f.passed for f in files),
        failed=sum(f.failed for f in files),
        errors=sum(f.errors for f in files),
        skipped=sum(f.skipped for f in files),
        seconds=round(seconds, 3),
        files=[
            FileRow(file=f.file, outcome=f.outcome, tests=f.tests, seconds=f.seconds) for f in files
        ],
        excluded=list(selection.excluded),
        node=node,
        unclassified=list(selection.unclassified),
        changed=list(selection.changed),
    )


def run_key(
    build_digest: str,
    selection: Selection,
    overlaid: Mapping[str, str],
    options: Sequence[str],
    where: Mapping[str, object],
) -> str:
    """SHA-256 of everything that decides a release-tests run's outcome.

    The build (its digest covers the test tree as built), the gate files and the contents
    (`overlaid`: name -> SHA-256) of the files the release lays over them, pytest's options, and
    `where`: the cluster, node, runtime and the rank environment the tests get. Two runs with one
    key run the same files the same way; the release's engine options are not part of it, since
    they reach the ranks' command lines and never the tests.
    """
    payload = {
        "build": build_digest,
        "gate": list(selection.gate),
        "overlaid": dict(sorted(overlaid.items())),
        "options": list(options),
        "where": where,
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def reusable(earlier: Iterable[EarlierTestRun], key: str) -> EarlierTestRun | None:
    """The newest earlier passing run with this key (runs are given oldest first)."""
    found = [run for run in earlier if run.run_key == key]
    return found[-1] if found else None
