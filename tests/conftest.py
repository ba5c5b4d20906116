"""Shared test configuration: under CI=true, a lab or docker test that skips is a failure.

Lab and docker tests need root, namespaces and a Docker engine. A developer without them sees a
skip with the reason; CI provisions them, so a skip there would hide a broken setup.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

MUST_RUN_IN_CI = ("lab", "docker")


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


HARDENING = ("tests/security/", "tests/faults/")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Count the attacks and faults tried (tests/security, tests/faults) and how many held."""
    counts: dict[str, int] = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        reports = terminalreporter.stats.get(outcome, [])
        counts[outcome] = len(
            {
                r.nodeid
                for r in reports
                if isinstance(r, pytest.TestReport) and r.nodeid.startswith(HARDENING)
            }
        )
    tried = sum(counts.values())
    if tried:
        terminalreporter.write_line(
            f"attacks and faults: {tried} tried, {counts['passed']} survived, "
            f"{counts['failed'] + counts['error']} not survived, {counts['skipped']} skipped "
            "(tests/security, tests/faults; docs/reliability.md)"
        )
