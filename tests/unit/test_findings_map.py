"""The map the closing count reads (tests/support/findings.py) stays true: every row of issue
30's table has findings, every test it names exists and is one the count counts, and a finding is
held only when a test of it passed and none failed."""

from __future__ import annotations

import ast

from tests.support.findings import COUNTED, FINDINGS, ROWS, Finding, finding_status
from tests.support.paths import ROOT


def test_every_row_of_the_table_has_findings_and_every_finding_a_row() -> None:
    assert {finding.row for finding in FINDINGS} == set(ROWS)


def test_every_named_test_exists_and_is_counted() -> None:
    for finding in FINDINGS:
        for test in finding.tests:
            path, _, name = test.partition("::")
            assert test.startswith(COUNTED), f"{test} is not counted"
            file = ROOT / path
            assert file.is_file(), f"{finding.what}: no {path}"
            functions = [
                node.name
                for node in ast.walk(ast.parse(file.read_text()))
                if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
            ]
            assert any(function.startswith(name) for function in functions), (
                f"{finding.what}: no test {name!r} in {path}"
            )


def test_a_finding_is_held_only_when_its_tests_passed_and_none_failed() -> None:
    finding = Finding(1, "x", "c", ("tests/security/test_a.py", "tests/faults/test_b.py::test_k"))
    a, b = "tests/security/test_a.py::test_one", "tests/faults/test_b.py::test_kept[1]"
    assert finding_status(finding, {a: "passed", b: "passed"}) == "held"
    assert finding_status(finding, {a: "passed", b: "failed"}) == "not held"
    assert finding_status(finding, {a: "skipped"}) == "not run"
    assert finding_status(finding, {"tests/faults/test_b.py::test_other": "passed"}) == "not run"
