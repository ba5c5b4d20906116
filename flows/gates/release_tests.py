"""The release-tests gate: the engine's own tests, selected and classified, run where it runs.

The recipe picked its release tests by hand per release, so a new test silently stayed out of
the gate. Here a selection step lists every candidate file of the test tree *as built for the
release* (the files the build digested, shipped beside the node's installed environment like
/opt/engine/tests in the image) plus the files the release itself changes (the classification's
`root` laid over that tree: files there that the built tree lacks or holds differently). Each
candidate must be classified `gate` or `excluded` with a reason; an unclassified file fails the
gate by name. Gate files run with pytest in the release environment on one node (default the
head) with the cluster stopped; the JUnit XML and pytest's output are kept as raw files.

Pure parts (selection, JUnit parsing, the verdict) sit apart from the node I/O so they are unit
tested without a node.
"""

from __future__ import annotations

import hashlib
import json
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from flows.cluster.boot.session import load_session, stop_session
from flows.cluster.build.image import context_files
from flows.cluster.build.wheel import ProcessBuild, build_release, install
from flows.cluster.transport.base import Transport
from flows.errors import BuildError, SparkgateError
from flows.gates.base import GateContext, GateResult, Outcome
from flows.spec.load import load_model
from flows.spec.release import ReleaseTestsGate
from flows.spec.release_tests import ReleaseTests

if TYPE_CHECKING:
    from flows.gates.release_tests_docker import ImageTests

GATE = "release_tests"
TREE_MARKER = ".sparkgate-tree.json"
# Files of the engine tree the tests need on the node: the tests and pytest's configuration.
TREE_PREFIXES = ("tests/",)
TREE_FILES = ("pyproject.toml",)
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Excluded(BaseModel):
    """A candidate file left out of the gate, and why."""

    model_config = _FROZEN

    file: str
    reason: str


class Selection(BaseModel):
    """What the selection step decided for every candidate file."""

    model_config = _FROZEN

    candidates: list[str] = Field(description="Files the patterns select, plus changed files.")
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
    tree: Iterable[str], classification: ReleaseTests, changed: Iterable[str] = ()
) -> Selection:
    """Candidates are the tree's files the patterns select plus the changed files; classify."""
    files = set(tree)
    changed_set = sorted(set(changed))
    candidates = sorted({name for name in files if classification.selects(name)} | set(changed_set))
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
) -> dict[str, object]:
    """The summary keys the record renders (plus what was unclassified or changed)."""
    return {
        "passed": sum(f.passed for f in files),
        "failed": sum(f.failed for f in files),
        "errors": sum(f.errors for f in files),
        "skipped": sum(f.skipped for f in files),
        "seconds": round(seconds, 3),
        "files": [
            {"file": f.file, "outcome": f.outcome, "tests": f.tests, "seconds": f.seconds}
            for f in files
        ],
        "excluded": [e.model_dump() for e in selection.excluded],
        "node": node,
        "unclassified": list(selection.unclassified),
        "changed": list(selection.changed),
    }


def tree_files(engine_dir: Path) -> dict[str, Path]:
    """The engine files the tests need on a node, as digested by the build (name -> path)."""
    found = {}
    for item in context_files(engine_dir):
        name = item.arcname.removeprefix("engine/")
        if name.startswith(TREE_PREFIXES) or name in TREE_FILES:
            found[name] = item.path
    return found


def overlay_files(root: Path, classification: ReleaseTests) -> dict[str, Path]:
    """Files under the classification's root that its patterns select (name -> path)."""
    if not root.is_dir():
        return {}
    found = {}
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if "__pycache__" not in name and classification.selects(name):
            found[name] = path
    return found


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def changed_files(overlay: Mapping[str, Path], built: Mapping[str, Path]) -> list[str]:
    """Overlay files the built tree lacks or holds with other content: what the release adds."""
    return sorted(
        name
        for name, path in overlay.items()
        if name not in built or _sha256(path) != _sha256(built[name])
    )


def ship_tree(
    build: ProcessBuild, files: Mapping[str, Path], transport: Transport, workdir: str
) -> str:
    """Copy the built tree's test files beside the node's environment once per digest."""
    tree = PurePosixPath(workdir) / "envs" / build.short / "engine"
    marker = str(tree / TREE_MARKER)
    found = transport.run(["cat", "--", marker], timeout=30)
    if found.ok and _marker_digest(found.stdout) == build.digest:
        return str(tree)
    transport.run(["rm", "-rf", "--", str(tree)], timeout=120, check=True)
    _put_all(transport, tree, files)
    transport.write_text(marker, json.dumps({"digest": build.digest, "files": sorted(files)}))
    return str(tree)


def _marker_digest(text: str) -> str | None:
    """The digest a tree marker records (None when unreadable: the tree is shipped again)."""
    try:
        value = json.loads(text).get("digest")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _put_all(transport: Transport, target: PurePosixPath, files: Mapping[str, Path]) -> None:
    folders = sorted({str((target / name).parent) for name in files} | {str(target)})
    transport.run(["mkdir", "-p", "--", *folders], timeout=60, check=True)
    for name, path in sorted(files.items()):
        transport.put(path, str(target / name))
    listing = transport.run(
        ["sha256sum", "--", *(str(target / name) for name in sorted(files))], timeout=300
    ).check()
    copied = {line.split()[1]: line.split()[0] for line in listing.stdout.splitlines() if line}
    bad = [n for n, p in files.items() if copied.get(str(target / n)) != _sha256(p)]
    if bad:
        raise BuildError(f"{transport.node}: test files differ after copying: {', '.join(bad)}")


def _list_tree(transport: Transport, tree: str) -> list[str]:
    listing = transport.run(["find", tree, "-type", "f", "-name", "*.py"], timeout=60).check()
    prefix = tree.rstrip("/") + "/"
    return sorted(line.removeprefix(prefix) for line in listing.stdout.splitlines() if line)


def pytest_argv(python: str, workspace: str, gate_files: Sequence[str]) -> list[str]:
    """pytest on the gate files with JUnit XML (xunit1 keeps each test's file); a file that
    fails to import is reported as an error while the other files still run."""
    return [
        python, "-m", "pytest", "-p", "no:cacheprovider", "-rfE", "-q",
        "--continue-on-collection-errors", f"--junitxml={workspace}/junit.xml",
        "-o", "junit_family=xunit1",
        "--rootdir", workspace, *gate_files,
    ]  # fmt: skip


def _failed(started: datetime, began: float, reason: str, **extra: object) -> GateResult:
    return GateResult(
        gate=GATE,
        outcome=Outcome.FAILED,
        reason=reason,
        started_at=started,
        seconds=round(time.monotonic() - began, 3),
        summary=dict(extra),
    )


def run_release_tests(
    context: GateContext, settings: ReleaseTestsGate, out_dir: Path
) -> GateResult:
    """Select, classify and run the release's tests on one node with the cluster stopped."""
    started, began = datetime.now(UTC), time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    say = context.say
    cluster, release = context.cluster, context.release
    node_name = settings.node or cluster.head.name
    nodes = {node.name: node for node in cluster.nodes}
    if node_name not in nodes or node_name not in context.transports:
        return _failed(started, began, f"release tests node {node_name!r} is not in the cluster")
    classification = load_model(settings.classification, ReleaseTests)
    running = load_session(context.state, cluster.name)
    if running is not None:
        say(f"stopping {running.release} on {cluster.name}: release tests run on a stopped cluster")
        stop_session(cluster, running, context.transports, context.state)
    transport = context.transports[node_name]
    built = tree_files(Path(release.build.source))
    overlay = overlay_files(Path(classification.root), classification)
    changed = changed_files(overlay, built)
    image: ImageTests | None = None
    if cluster.runtime.kind == "docker":
        from flows.gates.release_tests_docker import ImageTests  # noqa: PLC0415

        image = ImageTests.for_release(context, node_name)
        listed, python, tree = image.list_tree(), cluster.runtime.python, ""
    else:
        build = build_release(release, context.state / "build-cache", say)
        env = install(
            build, transport, nodes[node_name].workdir, base_python=cluster.runtime.python,
            progress=say,
        )  # fmt: skip
        tree = ship_tree(build, built, transport, nodes[node_name].workdir)
        listed, python = _list_tree(transport, tree), env.python
    selection = select(listed, classification, changed)
    files = ["selection.json"]
    _write(out_dir / "selection.json", selection.model_dump_json(indent=2))
    if selection.unclassified or selection.missing or not selection.gate:
        passed, reason = verdict(selection, [], 0)
        return _failed(
            started, began, reason, **summary(selection, [], time.monotonic() - began, node_name)
        ).model_copy(update={"files": files})
    workspace = _workspace(nodes[node_name].workdir)
    overlaid = {name: overlay[name] for name in changed}
    if image is not None:
        rc, output, junit = image.run_pytest(
            selection.gate, workspace, overlaid, timeout=settings.timeout_s
        )
    else:
        rc, output, junit = _run_pytest(
            transport, selection, python=python, tree=tree, workspace=workspace,
            changed=overlaid, timeout=settings.timeout_s, say=say,
        )  # fmt: skip
    outcomes, more = collect_outcomes(
        transport, selection, out_dir, output, junit=junit, workspace=workspace
    )
    files += more
    passed, reason = verdict(selection, outcomes, rc)
    seconds = time.monotonic() - began
    return GateResult(
        gate=GATE,
        outcome=Outcome.PASSED if passed else Outcome.FAILED,
        reason=reason,
        started_at=started,
        seconds=round(seconds, 3),
        summary=summary(selection, outcomes, seconds, node_name),
        files=files,
    )


def _run_pytest(
    transport: Transport,
    selection: Selection,
    *,
    python: str,
    tree: str,
    workspace: str,
    changed: Mapping[str, Path],
    timeout: float,
    say: Callable[[str], None],
) -> tuple[int, str, str]:
    """Copy the built tree to a fresh workspace, lay the changed files over it, run pytest;
    its exit status, output and where its JUnit XML is."""
    transport.run(["mkdir", "-p", "--", workspace], timeout=60, check=True)
    transport.run(["cp", "-a", "--", f"{tree}/.", workspace], timeout=300, check=True)
    if changed:
        _put_all(transport, PurePosixPath(workspace), changed)
    say(f"{transport.node}: pytest on {len(selection.gate)} gate files")
    try:
        result = transport.run(
            pytest_argv(python, workspace, selection.gate), timeout=timeout, cwd=workspace
        )
        rc, output = result.rc, f"{result.stdout}\n{result.stderr}"
    except SparkgateError as error:  # a timeout: keep whatever pytest wrote
        rc, output = 124, f"pytest did not finish within {timeout:g}s: {error}"
    return rc, output, f"{workspace}/junit.xml"


def collect_outcomes(
    transport: Transport,
    selection: Selection,
    out_dir: Path,
    output: str,
    *,
    junit: str,
    workspace: str,
) -> tuple[list[FileOutcome], list[str]]:
    """Keep pytest's output and JUnit XML as raw files, read the outcomes, drop the workspace."""
    _write(out_dir / "pytest.txt", output)
    files = ["pytest.txt"]
    if transport.run(["test", "-f", junit], timeout=30).ok:
        transport.get(junit, out_dir / "junit.xml")
        files.append("junit.xml")
        try:
            outcomes = parse_junit((out_dir / "junit.xml").read_text(), selection.gate)
        except (ValueError, ET.ParseError):
            outcomes = [FileOutcome(file=n, outcome="not-run", tests=0) for n in selection.gate]
    else:
        outcomes = [FileOutcome(file=n, outcome="not-run", tests=0) for n in selection.gate]
    transport.run(["rm", "-rf", "--", workspace], timeout=120)
    return outcomes, files


def _workspace(workdir: str) -> str:
    """A fresh folder on the node for one run (the built tree is never modified)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return str(PurePosixPath(workdir) / "release-tests" / stamp)


def _write(path: Path, text: str) -> None:
    """Write a raw file atomically (a reader of the record never sees half of it)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)
