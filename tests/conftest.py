"""Shared test configuration: the fixtures every folder may use, and the suite's own rules.

Under CI=true a lab or docker test that skips is a failure: lab and docker tests need root,
namespaces and a Docker engine; a developer without them sees a skip with the reason, CI
provisions them, so a skip there would hide a broken setup. A test that starts or uses a Prefect
server must say so with the `prefect_server` marker (`make unit` leaves those out).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Generator
from pathlib import Path

import pytest

from tests.support.findings import COUNTED, coverage_lines
from tests.support.local_cluster import (  # noqa: F401 - fixtures used by name
    cluster_root,
    local_cluster,
    release_r1,
    state,
    transports,
    warm_nodes,
)
from tests.support.paths import ROOT
from tests.support.prefect_server import prefect_api, prefect_in_process  # noqa: F401 - by name
from tests.support.project import ProjectKind

MUST_RUN_IN_CI = ("lab", "docker")


def _ctrl_c_reaches_children() -> None:
    """Give SIGINT its default meaning again when pytest was started with it ignored.

    A non-interactive shell starts a background job (`bash .ci/run &`) with SIGINT ignored, and
    an ignored signal stays ignored across exec: every command a test then interrupts "with
    Ctrl-C" would ignore it and run on (the qualification finishing and publishing anyway).
    From a terminal SIGINT is never ignored; the tests deliver it as a terminal would.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_ctrl_c_reaches_children()

SERVER_FIXTURES = ("prefect_api", "prefect_in_process")


@pytest.fixture
def project_releases() -> str | None:
    """What the `project` fixture puts in releases/: nothing here; a folder's conftest or a
    module overrides it ("shipped": copies of the shipped r1 and r2, engine path made absolute)."""
    return None


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project_releases: str | None) -> Path:
    """A private project for in-process commands: SPARKGATE_ROOT and the state folder in tmp."""
    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path))
    monkeypatch.setenv("SPARKGATE_STATE_DIR", str(tmp_path / ".sparkgate"))
    if project_releases == "shipped":
        releases = tmp_path / "releases"
        releases.mkdir()
        for name in ("r1", "r2"):
            text = (ROOT / "releases" / f"{name}.yaml").read_text()
            (releases / f"{name}.yaml").write_text(text.replace("../engine", str(ROOT / "engine")))
    elif project_releases is not None:
        raise pytest.UsageError(f"project_releases: unknown {project_releases!r}")
    return tmp_path


def _uses_a_server(item: pytest.Item) -> bool:
    """Whether the test gets a Prefect server: a server fixture, or a `project` made to talk to
    the session's server (`ProjectKind.server`, asked for by the fixture only when it runs)."""
    if any(name in getattr(item, "fixturenames", ()) for name in SERVER_FIXTURES):
        return True
    callspec = getattr(item, "callspec", None)
    kind = callspec.params.get("project") if callspec is not None else None
    return isinstance(kind, ProjectKind) and kind.server


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a test that gets a Prefect server without the `prefect_server` marker."""
    unmarked = [
        item.nodeid
        for item in items
        if _uses_a_server(item) and item.get_closest_marker("prefect_server") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            "these tests use a Prefect server but lack @pytest.mark.prefect_server: "
            + ", ".join(unmarked)
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    in_ci = os.environ.get("CI", "").lower() == "true"
    needs_real_infra = any(item.get_closest_marker(name) for name in MUST_RUN_IN_CI)
    if in_ci and needs_real_infra and report.skipped:
        # an expected failure counts too: without `wasxfail` pytest's exit status sees it
        if hasattr(report, "wasxfail"):
            del report.wasxfail
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI=true, which must run lab/docker tests: {report.longrepr}"
        )
    return report


_OUTCOMES = ("passed", "failed", "error", "skipped")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Count the attacks and faults tried (tests/security, tests/faults, and the lab tests of a
    finding) and how many held, then which of issue 30's findings held (tests/support/findings)."""
    outcomes: dict[str, str] = {}
    for outcome in _OUTCOMES:  # a failure or error overrides the same test's pass
        for report in terminalreporter.stats.get(outcome, []):
            counted = isinstance(report, pytest.TestReport) and report.nodeid.startswith(COUNTED)
            if counted and outcomes.get(report.nodeid) not in {"failed", "error"}:
                outcomes[report.nodeid] = outcome
    counts = {outcome: list(outcomes.values()).count(outcome) for outcome in _OUTCOMES}
    if outcomes:
        terminalreporter.write_line(
            f"attacks and faults: {len(outcomes)} tried, {counts['passed']} survived, "
            f"{counts['failed'] + counts['error']} not survived, {counts['skipped']} skipped "
            "(tests/security, tests/faults, lab tests of a finding; docs/reliability.md)"
        )
        for line in coverage_lines(outcomes):
            terminalreporter.write_line(line)
