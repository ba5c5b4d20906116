"""The release-tests gate's I/O: the engine's own tests, selected and classified, run on a node.

The recipe picked its release tests by hand per release, so a new test silently stayed out of
the gate. Here a selection step lists every candidate file of the test tree *as built for the
release* (the files the build digested, shipped beside the node's installed environment like
/opt/engine/tests in the image) plus the files the release itself changes (the classification's
`root` laid over that tree: files there that the built tree lacks or holds differently). Gate
files run with pytest in the release environment on one node (default the head) with the
cluster stopped; the JUnit XML and pytest's output are kept as raw files. The rules live in
`rules`; where and how pytest runs (a node's virtual environment, or a container of the release
image with the cluster's run arguments) is the runtime's `release_tests` host.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from flows.cluster.boot.session import load_session, stop_session
from flows.cluster.runtime.base import PytestRun
from flows.cluster.runtime.factory import runtime_for
from flows.cluster.runtime.pytest_host import tree_files
from flows.errors import SpecError
from flows.fileio import sha256_file
from flows.gates.base import (
    EarlierTestRun,
    GateContext,
    GateResult,
    GateVerdict,
    History,
    Outcome,
)
from flows.gates.files import GateFiles
from flows.gates.harness import failed, run_gate
from flows.gates.plan import PlanContext, PlanStep
from flows.gates.release_tests.checkout import classification_for
from flows.gates.release_tests.plan import plan_steps
from flows.gates.release_tests.rules import (
    NAME,
    FileOutcome,
    Selection,
    parse_junit,
    reusable,
    run_key,
    select,
    summary,
    verdict,
)
from flows.gates.release_tests.story import RELEASE_TESTS_STORY, ReleaseTestsStory
from flows.gates.release_tests.summary import ReleaseTestsSummary
from flows.spec.launch import render_all
from flows.spec.release import ReleaseTestsGate
from flows.spec.release_tests import ReleaseTests


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
        if name not in built or sha256_file(path) != sha256_file(built[name])
    )


@dataclass(frozen=True)
class ReleaseTestsRunner:
    """The release-tests gate as the registry lists it."""

    name: str = NAME
    title: str = "release tests"
    settings_model: type[ReleaseTestsGate] = ReleaseTestsGate
    summary_model: type[ReleaseTestsSummary] = ReleaseTestsSummary
    boot_failure: str = "boot failed"
    story: ReleaseTestsStory = RELEASE_TESTS_STORY

    def inputs(
        self, context: GateContext, earlier: Mapping[str, GateResult], history: History
    ) -> list[EarlierTestRun]:
        """The passing runs of earlier records of this cluster, when the release may reuse one."""
        del earlier
        settings = context.release.gates.release_tests
        return history.passed_release_tests(context) if settings.reuse else []

    def plan(self, given: PlanContext) -> list[PlanStep]:
        """What the gate would do on which node (`sparkgate qualify --plan`)."""
        return plan_steps(given)

    def run(
        self,
        context: GateContext,
        settings: ReleaseTestsGate,
        inputs: Sequence[EarlierTestRun],
        files: GateFiles,
    ) -> GateVerdict:
        """Select, classify and run the release's tests on one node with the cluster stopped,
        or take an earlier record's pass of the very same run."""
        began = datetime.now(UTC)
        say = context.say
        cluster, release = context.cluster, context.release
        node_name = settings.node or cluster.head.name
        nodes = {node.name: node for node in cluster.nodes}
        if node_name not in nodes or node_name not in context.transports:
            return failed(f"release tests node {node_name!r} is not in the cluster")
        try:
            classification = classification_for(cluster, settings, context.transports, files)
        except SpecError as error:
            return failed(f"release-tests classification: {error}")
        running = load_session(context.state, cluster.name)
        if running is not None:
            say(f"stopping {running.release} on {cluster.name}: release tests run on a stopped "
                "cluster")  # fmt: skip
            stop_session(cluster, running, context.transports, context.state)
        overlay = overlay_files(Path(classification.root), classification)
        # an adopted or operator-built image is tested as it is: there is no tree to compare with
        changed = (
            [] if release.build.makes_image
            else changed_files(overlay, tree_files(release.build.engine_tree))
        )  # fmt: skip
        runtime = runtime_for(cluster, context.transports, context.state, release=release)
        installed = runtime.install(runtime.build(release, say), say, nodes=[node_name])
        host = runtime.release_tests(node_name, installed, say)
        selection = select(
            host.list_tree(), classification, changed, classification.patched_tests()
        )
        files.write_text("selection.json", selection.model_dump_json(indent=2))
        if selection.unclassified or selection.missing or not selection.gate:
            _passed, reason = verdict(selection, [], 0)
            return failed(reason, summary=summary(selection, [], _since(began), node_name))
        overlaid = {name: overlay[name] for name in changed}
        key = run_key(
            installed.digest, selection,
            {name: sha256_file(path) for name, path in overlaid.items()},
            settings.pytest_options, _where(context, node_name),
        )  # fmt: skip
        same = reusable(inputs, key)
        if same is not None:
            say(f"release tests: the same run passed in record {same.record} (same build, "
                f"{len(selection.gate)} gate files, options and node); its result is taken, not "
                "run again (gates.release_tests.reuse: false runs them)")  # fmt: skip
            return _reused(same, selection, key, files, node_name, began)
        run = host.run_pytest(
            selection.gate, overlaid, files.root,
            timeout=settings.timeout_s, options=settings.pytest_options,
        )  # fmt: skip
        outcomes, rc = outcomes_of(run, selection), run.rc
        passed, reason = verdict(selection, outcomes, rc)
        found = summary(selection, outcomes, _since(began), node_name)
        return GateVerdict(
            outcome=Outcome.PASSED if passed else Outcome.FAILED,
            reason=reason,
            summary=found.model_copy(update={"run_key": key}),
        )


RELEASE_TESTS = ReleaseTestsRunner()


def run_release_tests(
    context: GateContext,
    settings: ReleaseTestsGate,
    out_dir: Path,
    earlier: Sequence[EarlierTestRun] = (),
) -> GateResult:
    """The gate through the harness, on its own (tests and scripts)."""
    return run_gate(RELEASE_TESTS, context, settings, list(earlier), out_dir)


def _where(context: GateContext, node: str) -> dict[str, object]:
    """Where and how the tests run, as far as it can change their outcome: the cluster, the
    node, its runtime and the rank environment of this release there (references, never a
    secret's value), and the release's host layers (a host change is run on, never reused
    from a run on the hosts before it)."""
    cluster = context.cluster
    plan = next(p for p in render_all(cluster, context.release) if p.node == node)
    layers = [layer.model_dump(mode="json") for layer in context.release.host]
    return {
        "cluster": cluster.name,
        "node": cluster.node(node).model_dump(mode="json"),
        "runtime": cluster.runtime.model_dump(mode="json"),
        "env": plan.env,
        **({"host": layers} if layers else {}),
    }


def _reused(  # noqa: PLR0917 - the earlier run and what this stage keeps of it
    same: EarlierTestRun,
    selection: Selection,
    key: str,
    files: GateFiles,
    node: str,
    began: datetime,
) -> GateVerdict:
    """The earlier run's raw files copied into this stage and counted again here, so the record
    stands on its own and `verify` recounts it like any other."""
    for name, path in sorted(same.files.items()):
        files.write_text(name, path.read_text(encoding="utf-8"))
    junit = same.files.get("junit.xml")
    run = PytestRun(
        node=node, rc=0, output="",
        junit_xml=junit.read_text(encoding="utf-8") if junit is not None else None,
        files=sorted(same.files),
    )  # fmt: skip
    outcomes = outcomes_of(run, selection)
    passed, reason = verdict(selection, outcomes, 0)
    found = summary(selection, outcomes, _since(began), node).model_copy(
        update={"run_key": key, "reused_from": same.record}
    )
    if not passed:  # the earlier run's files no longer say pass: nothing to take
        return failed(f"reused from {same.record}: {reason}", summary=found)
    return GateVerdict(
        outcome=Outcome.PASSED, reason=f"{reason} (reused from {same.record})", summary=found
    )


def _since(began: datetime) -> float:
    return (datetime.now(UTC) - began).total_seconds()


def outcomes_of(run: PytestRun, selection: Selection) -> list[FileOutcome]:
    """Each gate file's outcome from the run's JUnit XML; not-run when it has none or bad XML."""
    if run.junit_xml is not None:
        try:
            return parse_junit(run.junit_xml, selection.gate)
        except (ValueError, ET.ParseError):
            pass
    return [FileOutcome(file=name, outcome="not-run", tests=0) for name in selection.gate]
