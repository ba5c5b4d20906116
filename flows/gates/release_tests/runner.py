"""The release-tests gate's I/O: the engine's own tests, selected and classified, run on a node.

The recipe picked its release tests by hand per release, so a new test silently stayed out of
the gate. Here a selection step lists every candidate file of the test tree *as built for the
release* (the files the build digested, shipped beside the node's installed environment like
/opt/engine/tests in the image) plus the files the release itself changes (the classification's
`root` laid over that tree: files there that the built tree lacks or holds differently). Gate
files run with pytest in the release environment on one node (default the head) with the
cluster stopped; the JUnit XML and pytest's output are kept as raw files. The rules live in
`rules`, the docker runtime's way of running them in `docker`.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from flows.cluster.boot.session import load_session, stop_session
from flows.cluster.build.image import context_files
from flows.cluster.build.wheel import ProcessBuild, build_release, install
from flows.cluster.transport.base import Transport
from flows.errors import SparkgateError
from flows.gates.base import GateContext, GateResult, GateVerdict, History, Outcome
from flows.gates.files import GateFiles
from flows.gates.harness import failed, run_gate
from flows.gates.release_tests.docker import image_tests_for
from flows.gates.release_tests.nodefiles import put_all, sha256
from flows.gates.release_tests.rules import (
    NAME,
    FileOutcome,
    Selection,
    parse_junit,
    pytest_argv,
    select,
    summary,
    verdict,
)
from flows.gates.release_tests.summary import ReleaseTestsSummary
from flows.spec.load import load_model
from flows.spec.release import ReleaseTestsGate
from flows.spec.release_tests import ReleaseTests

if TYPE_CHECKING:
    from flows.gates.release_tests.docker import ImageTests

TREE_MARKER = ".sparkgate-tree.json"
# Files of the engine tree the tests need on the node: the tests and pytest's configuration.
TREE_PREFIXES = ("tests/",)
TREE_FILES = ("pyproject.toml",)


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


def changed_files(overlay: Mapping[str, Path], built: Mapping[str, Path]) -> list[str]:
    """Overlay files the built tree lacks or holds with other content: what the release adds."""
    return sorted(
        name
        for name, path in overlay.items()
        if name not in built or sha256(path) != sha256(built[name])
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
    put_all(transport, tree, files)
    transport.write_text(marker, json.dumps({"digest": build.digest, "files": sorted(files)}))
    return str(tree)


def _marker_digest(text: str) -> str | None:
    """The digest a tree marker records (None when unreadable: the tree is shipped again)."""
    try:
        value = json.loads(text).get("digest")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _list_tree(transport: Transport, tree: str) -> list[str]:
    listing = transport.run(["find", tree, "-type", "f", "-name", "*.py"], timeout=60).check()
    prefix = tree.rstrip("/") + "/"
    return sorted(line.removeprefix(prefix) for line in listing.stdout.splitlines() if line)


@dataclass(frozen=True)
class ReleaseTestsRunner:
    """The release-tests gate as the registry lists it."""

    name: str = NAME
    title: str = "release tests"
    settings_model: type[ReleaseTestsGate] = ReleaseTestsGate
    summary_model: type[ReleaseTestsSummary] = ReleaseTestsSummary
    boot_failure: str = "boot failed"

    def inputs(
        self, context: GateContext, earlier: Mapping[str, GateResult], history: History
    ) -> None:
        """Nothing from earlier gates or records."""
        del context, earlier, history

    def run(
        self, context: GateContext, settings: ReleaseTestsGate, inputs: None, files: GateFiles
    ) -> GateVerdict:
        """Select, classify and run the release's tests on one node with the cluster stopped."""
        del inputs
        began = datetime.now(UTC)
        say = context.say
        cluster, release = context.cluster, context.release
        node_name = settings.node or cluster.head.name
        nodes = {node.name: node for node in cluster.nodes}
        if node_name not in nodes or node_name not in context.transports:
            return failed(f"release tests node {node_name!r} is not in the cluster")
        classification = load_model(settings.classification, ReleaseTests)
        running = load_session(context.state, cluster.name)
        if running is not None:
            say(f"stopping {running.release} on {cluster.name}: release tests run on a stopped "
                "cluster")  # fmt: skip
            stop_session(cluster, running, context.transports, context.state)
        transport = context.transports[node_name]
        built = tree_files(Path(release.build.source))
        overlay = overlay_files(Path(classification.root), classification)
        changed = changed_files(overlay, built)
        image: ImageTests | None = image_tests_for(context, node_name)
        if image is not None:
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
        files.write_text("selection.json", selection.model_dump_json(indent=2))
        if selection.unclassified or selection.missing or not selection.gate:
            _passed, reason = verdict(selection, [], 0)
            return failed(reason, summary=summary(selection, [], _since(began), node_name))
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
        outcomes = collect_outcomes(
            transport, selection, files, output, junit=junit, workspace=workspace
        )
        passed, reason = verdict(selection, outcomes, rc)
        return GateVerdict(
            outcome=Outcome.PASSED if passed else Outcome.FAILED,
            reason=reason,
            summary=summary(selection, outcomes, _since(began), node_name),
        )


RELEASE_TESTS = ReleaseTestsRunner()


def run_release_tests(
    context: GateContext, settings: ReleaseTestsGate, out_dir: Path
) -> GateResult:
    """The gate through the harness, on its own (tests and scripts)."""
    return run_gate(RELEASE_TESTS, context, settings, None, out_dir)


def _since(began: datetime) -> float:
    return (datetime.now(UTC) - began).total_seconds()


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
        put_all(transport, PurePosixPath(workspace), changed)
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
    files: GateFiles,
    output: str,
    *,
    junit: str,
    workspace: str,
) -> list[FileOutcome]:
    """Keep pytest's output and JUnit XML as raw files, read the outcomes, drop the workspace."""
    files.write_text("pytest.txt", output)
    if transport.run(["test", "-f", junit], timeout=30).ok:
        transport.get(junit, files.path("junit.xml"))
        try:
            outcomes = parse_junit(files.path("junit.xml").read_text(), selection.gate)
        except (ValueError, ET.ParseError):
            outcomes = [FileOutcome(file=n, outcome="not-run", tests=0) for n in selection.gate]
    else:
        outcomes = [FileOutcome(file=n, outcome="not-run", tests=0) for n in selection.gate]
    transport.run(["rm", "-rf", "--", workspace], timeout=120)
    return outcomes


def _workspace(workdir: str) -> str:
    """A fresh folder on the node for one run (the built tree is never modified)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return str(PurePosixPath(workdir) / "release-tests" / stamp)
