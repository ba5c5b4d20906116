"""The release's patch series widens the release-test selection: every test it adds or changes.

The recipe carries a patch series over vLLM; a test a patch adds that nobody classified must fail
the gate rather than stay out of it unnoticed, and a classified one must run.
"""

from __future__ import annotations

import subprocess
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


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    )


def _fork(tmp_path: Path) -> Path:
    """A clone of a patched tree: base tag v1, then a patch that adds a test, changes one and
    deletes one, and touches a source file."""
    fork = tmp_path / "fork"
    (fork / "tests").mkdir(parents=True)
    for name in ("test_kept.py", "test_changed.py", "test_gone.py"):
        (fork / "tests" / name).write_text("def test(): pass\n")
    (fork / "model.py").write_text("a = 1\n")
    _git(fork, "init", "-q", "-b", "main")
    _git(fork, "add", ".")
    _git(fork, "commit", "-q", "-m", "base")
    _git(fork, "tag", "v1")
    (fork / "tests" / "test_changed.py").write_text("def test(): assert 1\n")
    (fork / "tests" / "test_gone.py").unlink()
    (fork / "tests" / "test_added.py").write_text("def test(): pass\n")
    (fork / "model.py").write_text("a = 2\n")
    _git(fork, "add", "-A")
    _git(fork, "commit", "-q", "-m", "patch")
    return fork


def _ranged(tmp_path: Path, fork: Path, range_: str) -> Path:
    (tmp_path / "project" / "config").mkdir(parents=True, exist_ok=True)
    file = tmp_path / "project" / "config" / "release-tests.yaml"
    file.write_text(
        "kind: release-tests\nroot: .\npatterns: [tests/test_kept.py]\n"
        f"patch_range:\n  repo: {fork}\n  range: {range_}\n"
        "files:\n  tests/test_kept.py: {gate: true}\n"
    )
    return file


def test_a_git_range_adds_the_test_files_it_adds_or_changes(tmp_path: Path) -> None:
    fork = _fork(tmp_path)
    classification = load_model(_ranged(tmp_path, fork, "v1..main"), ReleaseTests)
    assert classification.patched_tests() == ["tests/test_added.py", "tests/test_changed.py"]
    tree = ["tests/test_kept.py", "tests/test_added.py", "tests/test_changed.py"]
    selection = select(tree, classification, (), classification.patched_tests())
    assert selection.unclassified == ["tests/test_added.py", "tests/test_changed.py"]


def test_an_unknown_revision_or_clone_is_a_spec_error_at_the_range(tmp_path: Path) -> None:
    fork = _fork(tmp_path)
    with pytest.raises(SpecError, match=r"patch_range\.range.*v9"):
        load_model(_ranged(tmp_path, fork, "v9..main"), ReleaseTests)
    with pytest.raises(SpecError, match=r"patch_range\.repo: no such folder"):
        load_model(_ranged(tmp_path, tmp_path / "nowhere", "v1..main"), ReleaseTests)
    with pytest.raises(SpecError, match=r"patch_range\.range.*[Nn]ot a git repository"):
        load_model(_ranged(tmp_path, tmp_path / "project", "v1..main"), ReleaseTests)


def test_a_range_that_looks_like_an_option_is_refused(tmp_path: Path) -> None:
    fork = _fork(tmp_path)
    with pytest.raises(SpecError, match=r"patch_range\.range"):
        load_model(_ranged(tmp_path, fork, "--output=/tmp/x..main"), ReleaseTests)


def test_patches_may_be_a_list_of_diffs_and_folders(tmp_path: Path) -> None:
    (tmp_path / "series").mkdir()
    (tmp_path / "series" / "0071.patch").write_text(PATCH)
    other = PATCH.replace("test_dead_rows_fit.py", "test_other.py")
    (tmp_path / "extra.diff").write_text(other)
    file = tmp_path / "release-tests.yaml"
    file.write_text(
        "kind: release-tests\nroot: .\npatterns: [tests/*test_deepseek_v4*.py]\n"
        "patches: [series, extra.diff]\nfiles:\n  tests/v1/worker/test_other.py: {gate: true}\n"
    )
    classification = load_model(file, ReleaseTests)
    assert classification.patched_tests() == [
        "tests/v1/worker/test_dead_rows_fit.py",
        "tests/v1/worker/test_other.py",
    ]
    file.write_text(file.read_text().replace("extra.diff", "missing.diff"))
    with pytest.raises(SpecError, match=r"patches\[1\]: no such file or folder"):
        load_model(file, ReleaseTests)
