"""Release-tests selection, classification, JUnit parsing and verdict (no node needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

from flows.cluster.runtime.pytest_host import BASETEMP, pytest_argv
from flows.cluster.transport.base import Transport
from flows.gates.base import EarlierTestRun, GateContext, Outcome
from flows.gates.release_tests import story
from flows.gates.release_tests.rules import (
    FileOutcome,
    parse_junit,
    reusable,
    run_key,
    select,
    summary,
    verdict,
)
from flows.gates.release_tests.runner import (
    changed_files,
    overlay_files,
    run_release_tests,
    tree_files,
)
from flows.gates.release_tests.summary import ReleaseTestsSummary
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release, ReleaseTestsGate
from flows.spec.release_tests import Classification, ReleaseTests

ROOT = Path(__file__).resolve().parents[3]


def _classification(tmp_path: Path, **files: Classification) -> ReleaseTests:
    return ReleaseTests(kind="release-tests", root=tmp_path, patterns=["tests/test_*.py"],
                        files=files)  # fmt: skip


GATE = Classification(gate=True)


def test_selection_classifies_every_candidate_and_names_the_unclassified(tmp_path: Path) -> None:
    classification = _classification(
        tmp_path,
        **{
            "tests/test_a.py": GATE,
            "tests/test_b.py": Classification(excluded=True, reason="runs on the cluster"),
        },
    )
    tree = ["tests/test_a.py", "tests/test_b.py", "tests/test_new.py", "tests/conftest.py"]
    selection = select(tree, classification)
    assert selection.candidates == ["tests/test_a.py", "tests/test_b.py", "tests/test_new.py"]
    assert selection.gate == ["tests/test_a.py"]
    assert [(e.file, e.reason) for e in selection.excluded] == [
        ("tests/test_b.py", "runs on the cluster")
    ]
    assert selection.unclassified == ["tests/test_new.py"]
    passed, reason = verdict(selection, [], 0)
    assert not passed
    assert "tests/test_new.py" in reason
    assert "unclassified" in reason


def test_changed_files_are_candidates_and_a_vanished_gate_file_fails(tmp_path: Path) -> None:
    classification = _classification(
        tmp_path, **{"tests/test_a.py": GATE, "tests/test_gone.py": GATE}
    )
    selection = select(["tests/test_a.py"], classification, changed=["tests/test_added.py"])
    assert selection.changed == ["tests/test_added.py"]
    assert selection.unclassified == ["tests/test_added.py"]
    assert selection.missing == ["tests/test_gone.py"]
    fixed = select(
        ["tests/test_a.py", "tests/test_gone.py"],
        _classification(
            tmp_path,
            **{"tests/test_a.py": GATE, "tests/test_gone.py": GATE, "tests/test_added.py": GATE},
        ),
        changed=["tests/test_added.py"],
    )
    assert fixed.gate == ["tests/test_a.py", "tests/test_added.py", "tests/test_gone.py"]
    assert fixed.unclassified == fixed.missing == []


def _outcome(name: str, **counts: int) -> FileOutcome:
    tests = sum(counts.values())
    kind = "failed" if counts.get("failed") else ("passed" if counts.get("passed") else "not-run")
    return FileOutcome(file=name, outcome=kind, tests=tests, **counts)


def test_verdict_names_failing_files_and_needs_every_gate_file_to_run(tmp_path: Path) -> None:
    classification = _classification(tmp_path, **{"tests/test_a.py": GATE, "tests/test_b.py": GATE})
    selection = select(["tests/test_a.py", "tests/test_b.py"], classification)
    good = [_outcome("tests/test_a.py", passed=3), _outcome("tests/test_b.py", passed=1)]
    assert verdict(selection, good, 0) == (True, "4 tests in 2 gate files passed")
    failing = [
        _outcome("tests/test_a.py", passed=3),
        FileOutcome(file="tests/test_b.py", outcome="failed", tests=2, passed=1, failed=1,
                    failures=["test_round_trip"]),
    ]  # fmt: skip
    passed, reason = verdict(selection, failing, 1)
    assert not passed
    assert "tests/test_b.py failed (test_round_trip)" in reason
    assert "test_a" not in reason
    not_run = [_outcome("tests/test_a.py", passed=3), _outcome("tests/test_b.py")]
    assert "tests/test_b.py not-run" in verdict(selection, not_run, 0)[1]
    assert not verdict(selection, good, 2)[0]  # pytest itself complained (e.g. internal error)
    empty = select(["tests/test_a.py"], _classification(tmp_path, **{
        "tests/test_a.py": Classification(excluded=True, reason="r")}))  # fmt: skip
    assert verdict(empty, [], 0) == (
        False,
        "no gate files selected: nothing would prove this release",
    )


XUNIT1 = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4" time="1.5">
<testcase classname="tests.test_a" name="test_one" file="tests/test_a.py" line="3" time="0.5"/>
<testcase classname="tests.test_a" name="test_two" file="tests/test_a.py" line="9" time="0.25">
<failure message="assert 1 == 2">boom</failure></testcase>
<testcase classname="tests.test_b" name="test_skip" file="tests/test_b.py" line="1" time="0.0">
<skipped message="later"/></testcase>
</testsuite></testsuites>"""


def test_junit_gives_per_file_counts_outcomes_and_durations() -> None:
    files = ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py"]
    a, b, c = parse_junit(XUNIT1, files)
    assert (a.outcome, a.tests, a.passed, a.failed, a.seconds) == ("failed", 2, 1, 1, 0.75)
    assert a.failures == ["test_two"]
    assert (b.outcome, b.tests, b.skipped) == ("skipped", 1, 1)
    assert (c.outcome, c.tests) == ("not-run", 0)
    with pytest.raises(ValueError, match="not JUnit"):
        parse_junit("<html/>", files)


def test_junit_written_by_real_pytest_including_a_collection_error(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    (tests / "test_bad.py").write_text("def test_bad():\n    assert 1 == 2\n")
    (tests / "test_broken.py").write_text("import not_a_module_anywhere\n")
    names = ["tests/test_bad.py", "tests/test_broken.py", "tests/test_ok.py"]
    done = subprocess.run(
        pytest_argv(sys.executable, str(tmp_path), names),
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    junit = tmp_path / "junit.xml"
    assert done.returncode != 0
    bad, broken, ok = parse_junit(junit.read_text(), names)
    assert (bad.outcome, bad.failed, bad.failures) == ("failed", 1, ["test_bad"])
    assert broken.outcome == "error"
    assert (ok.outcome, ok.passed) == ("passed", 1)


def test_tests_temporary_folders_live_in_the_workspace_not_the_nodes_tmp(tmp_path: Path) -> None:
    """pytest's default would number them under /tmp and delete other sessions' folders."""
    tests = tmp_path / "tests"
    tests.mkdir()
    seen = tmp_path / "seen.txt"
    (tests / "test_tmp.py").write_text(
        "from pathlib import Path\n"
        "def test_tmp(tmp_path):\n"
        f"    Path({str(seen)!r}).write_text(str(tmp_path))\n"
    )
    done = subprocess.run(
        pytest_argv(sys.executable, str(tmp_path), ["tests/test_tmp.py"]),
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout
    assert Path(seen.read_text()).is_relative_to(tmp_path / BASETEMP)


def test_summary_has_the_keys_the_record_renders(tmp_path: Path) -> None:
    classification = _classification(
        tmp_path,
        **{"tests/test_a.py": GATE, "tests/test_b.py": Classification(excluded=True, reason="r")},
    )
    selection = select(["tests/test_a.py", "tests/test_b.py"], classification)
    files = [FileOutcome(file="tests/test_a.py", outcome="passed", tests=2, passed=2, seconds=1.5)]
    data = summary(selection, files, 3.25, "local0").model_dump()
    assert {"passed", "failed", "errors", "skipped", "seconds", "files", "excluded", "node"} <= set(
        data
    )
    assert data["passed"] == 2
    assert data["files"] == [
        {"file": "tests/test_a.py", "outcome": "passed", "tests": 2, "seconds": 1.5}
    ]
    assert data["excluded"] == [{"file": "tests/test_b.py", "reason": "r"}]
    assert data["node"] == "local0"


def test_overlay_files_the_built_tree_lacks_or_holds_differently_are_changed(
    tmp_path: Path,
) -> None:
    built_root, overlay_root = tmp_path / "built", tmp_path / "overlay"
    for root in (built_root, overlay_root):
        (root / "tests").mkdir(parents=True)
    (built_root / "tests/test_same.py").write_text("x = 1\n")
    (overlay_root / "tests/test_same.py").write_text("x = 1\n")
    (built_root / "tests/test_edit.py").write_text("x = 1\n")
    (overlay_root / "tests/test_edit.py").write_text("x = 2\n")
    (overlay_root / "tests/test_new.py").write_text("x = 3\n")
    (overlay_root / "tests/helper.py").write_text("x = 4\n")
    classification = _classification(overlay_root)
    overlay = overlay_files(overlay_root, classification)
    assert sorted(overlay) == ["tests/test_edit.py", "tests/test_new.py", "tests/test_same.py"]
    built = {p.relative_to(built_root).as_posix(): p for p in built_root.rglob("*.py")}
    assert changed_files(overlay, built) == ["tests/test_edit.py", "tests/test_new.py"]


def test_shipped_classification_covers_the_engine_tree_and_changes_nothing() -> None:
    release = load_model(ROOT / "releases/r2.yaml", Release)
    classification = load_model(release.gates.release_tests.classification, ReleaseTests)
    built = tree_files(Path(release.build.source))
    assert "pyproject.toml" in built
    assert "tests/conftest.py" in built
    assert not any("__pycache__" in name for name in built)
    changed = changed_files(overlay_files(Path(classification.root), classification), built)
    assert changed == []
    selection = select(built, classification, changed)
    assert selection.unclassified == selection.missing == []
    assert "tests/test_engine_kernels.py" in selection.gate
    assert "tests/test_engine_determinism.py" in [e.file for e in selection.excluded]


def test_the_failing_test_release_adds_one_gate_file_over_the_built_tree() -> None:
    release = load_model(ROOT / "releases/faulty/failing-test.yaml", Release)
    assert release.previous == "r1"
    classification = load_model(release.gates.release_tests.classification, ReleaseTests)
    built = tree_files(Path(release.build.source))
    changed = changed_files(overlay_files(Path(classification.root), classification), built)
    assert changed == ["tests/test_release_accents.py"]
    selection = select(built, classification, changed)
    assert "tests/test_release_accents.py" in selection.gate
    assert selection.unclassified == selection.missing == []


def _gate_context(cluster: Cluster, tmp_path: Path) -> GateContext:
    release = load_model(ROOT / "releases/r1.yaml", Release)
    transports = cast("dict[str, Transport]", dict.fromkeys((n.name for n in cluster.nodes), None))
    return GateContext(
        cluster=cluster, release=release, previous=None, transports=transports,
        state=tmp_path / "state", experiments=tmp_path / "experiments",
    )  # fmt: skip


def test_an_unknown_node_fails_the_gate_by_name_before_touching_any_node(tmp_path: Path) -> None:
    cluster = load_model(ROOT / "config/local.yaml", Cluster)
    result = run_release_tests(
        _gate_context(cluster, tmp_path), ReleaseTestsGate(node="nowhere"), tmp_path / "out"
    )
    assert result.outcome == Outcome.FAILED
    assert "'nowhere'" in result.reason


def test_the_run_key_changes_with_what_the_tests_see_and_only_that(tmp_path: Path) -> None:
    classification = _classification(tmp_path, **{"tests/test_a.py": GATE, "tests/test_b.py": GATE})
    selection = select(["tests/test_a.py", "tests/test_b.py"], classification)
    where = {"cluster": "local", "node": {"name": "local0"}, "env": {}}
    key = run_key("sha256:aaa", selection, {}, ["-q"], where)
    assert key == run_key("sha256:aaa", selection, {}, ["-q"], dict(where))
    others = [
        run_key("sha256:bbb", selection, {}, ["-q"], where),
        run_key("sha256:aaa", selection, {"tests/test_a.py": "f" * 64}, ["-q"], where),
        run_key("sha256:aaa", selection, {}, ["-q", "-x"], where),
        run_key("sha256:aaa", selection, {}, ["-q"], {**where, "env": {"HF_HUB_OFFLINE": "1"}}),
        run_key("sha256:aaa", selection, {}, ["-q"], {**where, "node": {"name": "local1"}}),
    ]
    assert len({key, *others}) == 1 + len(others)


def test_the_newest_earlier_run_with_the_key_is_taken() -> None:
    runs = [
        EarlierTestRun(record="2026-12-01-r1", run_key="k1", files={}),
        EarlierTestRun(record="2026-12-02-r1", run_key="k2", files={}),
        EarlierTestRun(record="2026-12-03-r1", run_key="k1", files={}),
    ]
    found = reusable(runs, "k1")
    assert found is not None
    assert found.record == "2026-12-03-r1"
    assert reusable(runs, "k3") is None


def test_a_taken_run_says_whose_it_is_and_times_nothing() -> None:
    taken = ReleaseTestsSummary(passed=3, seconds=0.2, node="local0", reused_from="2026-12-06-r1")
    assert (
        story.tests_line(taken)
        == "3 passed, 0 failed, 0 errors, 0 skipped on local0 in record 2026-12-06-r1"
    )
    text = "\n".join(story.section(taken))
    assert "Not run again" in text
    assert "`2026-12-06-r1`" in text
    ran = taken.model_copy(update={"reused_from": None})
    assert story.tests_line(ran).endswith("in 0.200 s on local0")
