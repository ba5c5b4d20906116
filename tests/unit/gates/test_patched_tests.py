"""The release's patch series widens the release-test selection: every test it adds or changes.

The recipe carries a patch series over vLLM; a test a patch adds that nobody classified must fail
the gate rather than stay out of it unnoticed, and a classified one must run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.errors import SpecError
from flows.gates.release_tests.rules import select
from flows.spec.load import load_model
from flows.spec.release_tests import ReleaseTests, patched_test_files

PATCH = """\
From 1a2b Mon Sep 17 00:00:00 2001
Subject: [PATCH 0071] dead rows: refuse a recipe whose prefill cannot fit
--- a/vllm/v1/worker/gpu_model_runner.py
+++ b/vllm/v1/worker/gpu_model_runner.py
@@ -1 +1 @@
-a
+b
--- /dev/null
+++ b/tests/v1/worker/test_dead_rows_fit.py\t2026-10-01 00:00:00
@@ -0,0 +1 @@
+def test_fit(): pass
--- a/tests/v1/core/test_old.py
+++ /dev/null
@@ -1 +0,0 @@
-x
"""


def test_the_test_files_a_diff_adds_or_changes_are_named() -> None:
    assert patched_test_files(PATCH) == ["tests/v1/worker/test_dead_rows_fit.py"]


def _classification(tmp_path: Path, files: str) -> ReleaseTests:
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "0071-dead-rows.patch").write_text(PATCH)
    file = tmp_path / "release-tests.yaml"
    file.write_text(
        "kind: release-tests\nroot: .\npatterns: [tests/*test_deepseek_v4*.py]\n"
        f"patches: patches\nfiles:\n{files}"
    )
    return load_model(file, ReleaseTests)


def test_a_patched_test_nobody_classified_fails_the_selection(tmp_path: Path) -> None:
    classification = _classification(tmp_path, "  tests/test_deepseek_v4_x.py: {gate: true}\n")
    tree = ["tests/test_deepseek_v4_x.py", "tests/v1/worker/test_dead_rows_fit.py"]
    selection = select(tree, classification, (), classification.patched_tests())
    assert selection.unclassified == ["tests/v1/worker/test_dead_rows_fit.py"]
    assert selection.gate == ["tests/test_deepseek_v4_x.py"]


def test_a_classified_patched_test_runs_though_no_pattern_selects_it(tmp_path: Path) -> None:
    classification = _classification(
        tmp_path,
        "  tests/test_deepseek_v4_x.py: {gate: true}\n"
        "  tests/v1/worker/test_dead_rows_fit.py: {gate: true}\n",
    )
    tree = ["tests/test_deepseek_v4_x.py", "tests/v1/worker/test_dead_rows_fit.py"]
    selection = select(tree, classification, (), classification.patched_tests())
    assert selection.gate == [
        "tests/test_deepseek_v4_x.py",
        "tests/v1/worker/test_dead_rows_fit.py",
    ]
    assert selection.unclassified == []


def test_a_missing_patch_and_dead_classification_are_spec_errors(tmp_path: Path) -> None:
    file = tmp_path / "release-tests.yaml"
    file.write_text(
        "kind: release-tests\nroot: .\npatterns: [tests/test_a*.py]\npatches: nope.patch\n"
        "files:\n  tests/test_a.py: {gate: true}\n"
    )
    with pytest.raises(SpecError, match="patches: no such file or folder"):
        load_model(file, ReleaseTests)
    (tmp_path / "empty.patch").write_text("")
    file.write_text(
        "kind: release-tests\nroot: .\npatterns: [tests/test_a*.py]\npatches: empty.patch\n"
        "files:\n  tests/test_b.py: {gate: true}\n"
    )
    with pytest.raises(SpecError, match=r"tests/test_b\.py: matches none of the patterns"):
        load_model(file, ReleaseTests)
