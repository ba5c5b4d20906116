"""The release-tests gate on a private local cluster: the real build, the node's env, pytest.

Each test trims the classification to a few fast gate files (the others excluded with a reason)
so the set stays within minutes on a small machine; the selection still sees the whole tree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flows.cluster.transport.local import LocalTransport
from flows.gates.base import EarlierTestRun, GateContext, GateResult, Outcome
from flows.gates.release_tests.runner import run_release_tests
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release, ReleaseTestsGate
from tests.support.overlays import write_yaml
from tests.support.paths import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAST = {"tests/test_engine_tokenizer.py", "tests/test_engine_scheduler.py"}
ENGINE_FILES = sorted(p.relative_to(ROOT / "engine").as_posix()
                      for p in (ROOT / "engine/tests").glob("test_*.py"))  # fmt: skip


def _summary(result: GateResult) -> dict[str, Any]:
    """The gate's typed summary, as the JSON the record keeps."""
    assert result.summary is not None, result.reason
    return result.summary.model_dump(mode="json")


@pytest.fixture(scope="session")
def gate_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private state folder whose build cache is the project's (wheelhouse downloaded once)."""
    state = tmp_path_factory.mktemp("state")
    shared = ROOT / ".sparkgate" / "build-cache"
    shared.mkdir(parents=True, exist_ok=True)
    (state / "build-cache").symlink_to(shared, target_is_directory=True)
    return state


def trimmed(base: Path, folder: Path, root: Path | None = None) -> Path:
    """A classification extending `base` with only the FAST engine files kept as gate files."""
    files = {
        name: {"gate": False, "excluded": True, "reason": "trimmed for the gate's own test"}
        for name in ENGINE_FILES
        if name not in FAST
    }
    overlay: dict[str, object] = {"files": files}
    if root is not None:
        overlay["root"] = str(root)
    return write_yaml(folder / "release-tests.yaml", {"extends": str(base), "set": overlay})


def _context(
    cluster: Cluster, release: Release, transports: dict[str, LocalTransport], state: Path
) -> GateContext:
    lines: list[str] = []
    return GateContext(
        cluster=cluster, release=release, previous=None, transports=dict(transports),
        state=state, experiments=state / "experiments", say=lines.append,
    )  # fmt: skip


def test_r1_release_tests_pass_with_per_file_results(
    local_cluster: Cluster,
    release_r1: Release,
    transports: dict[str, LocalTransport],
    gate_state: Path,
    tmp_path: Path,
) -> None:
    settings = ReleaseTestsGate(
        classification=trimmed(ROOT / "config/release-tests.yaml", tmp_path), timeout_s=600
    )
    out = tmp_path / "out"
    result = run_release_tests(_context(local_cluster, release_r1, transports, gate_state),
                               settings, out)  # fmt: skip
    assert result.outcome == Outcome.PASSED, result.reason
    summary = _summary(result)
    assert summary["node"] == local_cluster.head.name
    assert summary["failed"] == summary["errors"] == 0
    assert summary["passed"] > 0
    assert {f["file"] for f in summary["files"]} == FAST
    assert all(f["outcome"] == "passed" and f["tests"] > 0 for f in summary["files"])
    excluded = {e["file"]: e["reason"] for e in summary["excluded"]}
    assert "tests/test_engine_determinism.py" in excluded
    assert set(excluded) | FAST == set(ENGINE_FILES)
    assert {"junit.xml", "pytest.txt", "selection.json"} <= set(result.files)
    assert "<testsuite" in (out / "junit.xml").read_text()
    selection = json.loads((out / "selection.json").read_text())
    assert selection["unclassified"] == []
    assert selection["changed"] == []


def test_an_unclassified_file_fails_the_gate_naming_it(
    local_cluster: Cluster,
    release_r1: Release,
    transports: dict[str, LocalTransport],
    gate_state: Path,
    tmp_path: Path,
) -> None:
    overlay = tmp_path / "overlay"
    (overlay / "tests").mkdir(parents=True)
    (overlay / "tests/test_brand_new.py").write_text("def test_new() -> None:\n    assert True\n")
    settings = ReleaseTestsGate(
        classification=trimmed(ROOT / "config/release-tests.yaml", tmp_path, root=overlay)
    )
    out = tmp_path / "out"
    result = run_release_tests(_context(local_cluster, release_r1, transports, gate_state),
                               settings, out)  # fmt: skip
    assert result.outcome == Outcome.FAILED
    assert "tests/test_brand_new.py" in result.reason
    assert "unclassified" in result.reason
    assert _summary(result)["unclassified"] == ["tests/test_brand_new.py"]
    assert not (out / "junit.xml").exists()  # nothing ran: the stage stops at the selection


def test_the_failing_test_release_fails_on_its_own_test_only(
    local_cluster: Cluster,
    transports: dict[str, LocalTransport],
    gate_state: Path,
    tmp_path: Path,
) -> None:
    release = load_model(ROOT / "releases/faulty/failing-test.yaml", Release)
    shipped = release.gates.release_tests.classification
    settings = ReleaseTestsGate(classification=trimmed(shipped, tmp_path))
    out = tmp_path / "out"
    result = run_release_tests(_context(local_cluster, release, transports, gate_state),
                               settings, out)  # fmt: skip
    assert result.outcome == Outcome.FAILED
    assert "tests/test_release_accents.py failed" in result.reason
    assert "test_accented_latin_text_round_trips" in result.reason
    outcomes = {f["file"]: f["outcome"] for f in _summary(result)["files"]}
    assert outcomes == {**dict.fromkeys(FAST, "passed"), "tests/test_release_accents.py": "failed"}
    assert _summary(result)["changed"] == ["tests/test_release_accents.py"]
    assert _summary(result)["failed"] == 1
    assert "test_accented_latin_text_round_trips" in (out / "pytest.txt").read_text()


def test_the_heads_checkout_classifies_and_the_recipes_runner_runs(
    local_cluster: Cluster,
    release_r1: Release,
    transports: dict[str, LocalTransport],
    gate_state: Path,
    tmp_path: Path,
) -> None:
    """Issue 26 item 10: the classification is the one the head's checkout holds (JSON, as the
    recipe's config/release-tests.json), and pytest runs with the release's options: under the
    recipe's `--noconftest` the startup tests lose the engine's conftest fixtures."""
    startup = "tests/test_engine_startup.py"
    files: dict[str, object] = {
        name: {"gate": True} if name in FAST | {startup} else
        {"excluded": True, "reason": "trimmed for the gate's own test"}
        for name in ENGINE_FILES
    }  # fmt: skip
    checkout = Path(local_cluster.head.workdir) / "config"
    checkout.mkdir(parents=True, exist_ok=True)
    recipe_file = {"kind": "release-tests", "root": ".", "patterns": ["tests/test_*.py"]}
    (checkout / "release-tests.json").write_text(json.dumps({**recipe_file, "files": files}))
    settings = ReleaseTestsGate(
        checkout_classification="config/release-tests.json",
        pytest_options=["-q", "--noconftest", "-p", "no:cacheprovider", "-rfE"],
        timeout_s=600,
    )
    out = tmp_path / "out"
    result = run_release_tests(_context(local_cluster, release_r1, transports, gate_state),
                               settings, out)  # fmt: skip
    outcomes = {f["file"]: f["outcome"] for f in _summary(result)["files"]}
    assert outcomes == {**dict.fromkeys(FAST, "passed"), startup: "error"}
    assert result.outcome == Outcome.FAILED
    assert "fixture 'start_cluster' not found" in (out / "pytest.txt").read_text()
    source = (out / "checkout-classification" / "source.txt").read_text()
    assert source.startswith(f"{local_cluster.head.name}:{checkout}/release-tests.json sha256:")


def test_the_same_run_passed_in_an_earlier_record_is_taken_and_a_changed_file_runs(
    local_cluster: Cluster,
    release_r1: Release,
    transports: dict[str, LocalTransport],
    gate_state: Path,
    tmp_path: Path,
) -> None:
    """r2 changes an engine option only: its tests are r1's, in the same build, run the same
    way, so r1's pass stands for them; the failing-test release lays a test file of its own
    over the tree, so the same earlier pass never stands for it."""
    settings = ReleaseTestsGate(
        classification=trimmed(ROOT / "config/release-tests.yaml", tmp_path), timeout_s=600
    )
    first = run_release_tests(_context(local_cluster, release_r1, transports, gate_state),
                              settings, tmp_path / "r1")  # fmt: skip
    key = _summary(first)["run_key"]
    assert first.outcome == Outcome.PASSED, first.reason
    assert key
    kept = {name: tmp_path / "r1" / name for name in ("junit.xml", "pytest.txt")}
    earlier = [EarlierTestRun(record="2026-12-06-r1", run_key=key, files=kept)]

    release_r2 = load_model(ROOT / "releases/r2.yaml", Release)
    context = _context(local_cluster, release_r2, transports, gate_state)
    again = run_release_tests(context, settings, tmp_path / "r2", earlier)
    assert again.outcome == Outcome.PASSED, again.reason
    assert again.reason.endswith("(reused from 2026-12-06-r1)")
    assert _summary(again)["reused_from"] == "2026-12-06-r1"
    assert _summary(again)["run_key"] == key
    assert (tmp_path / "r2" / "junit.xml").read_bytes() == kept["junit.xml"].read_bytes()
    assert _summary(again)["files"] == _summary(first)["files"]

    failing = load_model(ROOT / "releases/faulty/failing-test.yaml", Release)
    own = ReleaseTestsGate(
        classification=trimmed(failing.gates.release_tests.classification, tmp_path / "own")
    )
    ran = run_release_tests(_context(local_cluster, failing, transports, gate_state),
                            own, tmp_path / "failing", earlier)  # fmt: skip
    assert _summary(ran)["reused_from"] is None
    assert _summary(ran)["run_key"] not in (None, key)
    assert ran.outcome == Outcome.FAILED
    assert "tests/test_release_accents.py failed" in ran.reason
