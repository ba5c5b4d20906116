"""Issue 26 item 10: release tests as the recipe runs them, classified by the recipe's own file.

The recipe's runner is `pytest -q --noconftest -p no:cacheprovider -rfE <explicit list>` with
HF_HUB_OFFLINE=1 (recipe-release-process.md §1, the r6d gate bundle); since r6u it classifies
its tests in `config/release-tests.json` in its checkout (the release thread, r6v post). A copy
beside the release goes stale, so the gate reads the head's file; a file that file leaves
unclassified still fails. Real pytest and a real local transport here; the whole gate on a
local cluster is tests/integration/test_gate_release_tests.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flows.cli import main
from flows.cluster.runtime.docker_tests import container_argv
from flows.cluster.runtime.pytest_host import pytest_argv
from flows.cluster.transport.local import LocalTransport
from flows.errors import SpecError
from flows.gates.files import GateFiles
from flows.gates.release_tests.checkout import classification_for
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release, ReleaseTestsGate
from tests.support.overlays import write_yaml

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "spark-ds41f"
RECIPE_RUNNER = ["-q", "--noconftest", "-p", "no:cacheprovider", "-rfE"]


def test_the_runner_takes_the_releases_pytest_options(tmp_path: Path) -> None:
    """A conftest fixture is not found under --noconftest: the options reach pytest."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text(
        "import pytest\n@pytest.fixture\ndef fixture_of_the_conftest():\n    return 1\n"
    )
    (tests / "test_uses.py").write_text("def test_uses(fixture_of_the_conftest):\n    pass\n")
    names = ["tests/test_uses.py"]
    runs = {}
    for label, options in (("default", None), ("recipe", RECIPE_RUNNER)):
        argv = pytest_argv(sys.executable, str(tmp_path), names, *([options] if options else []))
        runs[label] = subprocess.run(
            argv, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120
        )  # fmt: skip
    assert runs["default"].returncode == 0, runs["default"].stdout
    assert runs["recipe"].returncode != 0
    assert "fixture 'fixture_of_the_conftest' not found" in runs["recipe"].stdout


def test_the_container_runs_pytest_with_the_recipe_runners_options() -> None:
    argv = container_argv("python3", "/w/t", ["tests/a/test_x.py"], "/opt/t", RECIPE_RUNNER)
    at = argv.index("pytest")
    assert argv[at + 1 : at + 1 + len(RECIPE_RUNNER)] == RECIPE_RUNNER
    assert argv[-1] == "tests/a/test_x.py"
    assert "--junitxml=/w/t/tree/junit.xml" in argv  # sparkgate's own, always


def test_sparkgates_own_options_and_paths_out_of_the_checkout_are_refused(
    tmp_path: Path,
) -> None:
    path = write_yaml(
        tmp_path / "r9.yaml",
        {
            "extends": str(EXAMPLE / "releases" / "r6x.yaml"),
            "set": {
                "name": "r9",
                "gates": {
                    "release_tests": {
                        "pytest_options": ["-q", "--junitxml=/tmp/x.xml"],
                        "checkout_classification": "../elsewhere.json",
                    }
                },
            },
        },
    )
    with pytest.raises(SpecError) as raised:
        load_model(path, Release)
    said = str(raised.value)
    assert "gates.release_tests.pytest_options[1]" in said
    assert "sparkgate sets --junitxml itself" in said
    assert "checkout_classification: must stay inside the checkout" in said


def test_the_example_releases_run_the_recipes_runner_on_its_own_classification() -> None:
    for name in ("r6x.yaml", "r6y.yaml", "ring/r6x.yaml", "ring/r6y.yaml"):
        settings = load_model(EXAMPLE / "releases" / name, Release).gates.release_tests
        assert settings.pytest_options == RECIPE_RUNNER, name
        assert settings.checkout_classification == "config/release-tests.json", name


def test_the_plan_names_the_heads_file_and_the_runner(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    release, cluster = EXAMPLE / "releases" / "r6x.yaml", EXAMPLE / "clusters" / "tp3-triangle.yaml"
    capsys.readouterr()
    assert main(["qualify", str(release), "--cluster", str(cluster), "--plan", "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    [step] = [s for s in steps if s["stage"] == "release_tests"]
    where = "dgx1:/home/swank/projects/spark-ds41f/config/release-tests.json"
    assert step["detail"]["classification"].startswith(where)
    assert step["detail"]["pytest_options"] == RECIPE_RUNNER


def _head_cluster(tmp_path: Path) -> Cluster:
    local = load_model(ROOT / "config" / "local.yaml", Cluster)
    checkout = tmp_path / "checkout"
    (checkout / "config").mkdir(parents=True)
    nodes = [node.model_copy(update={"workdir": str(checkout)}) for node in local.nodes]
    return local.model_copy(update={"nodes": nodes})


CHECKOUT_FILE = {
    "kind": "release-tests",
    "root": ".",
    "patterns": ["tests/test_*.py"],
    "files": {
        "tests/test_a.py": {"gate": True},
        "tests/test_b.py": {"excluded": True, "reason": "needs vLLM's dist_init fixture"},
    },
}


@pytest.mark.parametrize("suffix", ["json", "yaml"])
def test_the_classification_is_read_from_the_heads_checkout(tmp_path: Path, suffix: str) -> None:
    cluster = _head_cluster(tmp_path)
    head = Path(cluster.head.workdir)
    text = json.dumps(CHECKOUT_FILE) if suffix == "json" else yaml.safe_dump(CHECKOUT_FILE)
    (head / "config" / f"release-tests.{suffix}").write_text(text)
    settings = ReleaseTestsGate(checkout_classification=f"config/release-tests.{suffix}")
    transports = {n.name: LocalTransport(n.name) for n in cluster.nodes}
    files = GateFiles(tmp_path / "out")
    found = classification_for(cluster, settings, transports, files)
    assert found.gate_files() == ["tests/test_a.py"]
    # the rule stays: a test file the recipe's file does not classify fails the gate
    assert found.unclassified(["tests/test_a.py", "tests/test_new.py"]) == ["tests/test_new.py"]
    kept = (tmp_path / "out" / "checkout-classification" / "source.txt").read_text()
    assert kept.startswith(f"{cluster.head.name}:{head}/config/release-tests.{suffix} sha256:")


def test_a_checkout_without_the_file_fails_naming_the_heads_path(tmp_path: Path) -> None:
    cluster = _head_cluster(tmp_path)
    settings = ReleaseTestsGate(checkout_classification="config/release-tests.json")
    transports = {n.name: LocalTransport(n.name) for n in cluster.nodes}
    with pytest.raises(
        SpecError, match=r"config/release-tests\.json.*no such file in the operator"
    ):
        classification_for(cluster, settings, transports, GateFiles(tmp_path / "out"))


def test_a_checkout_file_in_another_format_is_refused_with_its_path(tmp_path: Path) -> None:
    """The recipe's own format is not published: only the release-tests schema is read."""
    cluster = _head_cluster(tmp_path)
    recipe_like = {"gate": ["tests/test_a.py"], "excluded": {"tests/test_b.py": "dist_init"}}
    (Path(cluster.head.workdir) / "config" / "release-tests.json").write_text(
        json.dumps(recipe_like)
    )
    settings = ReleaseTestsGate(checkout_classification="config/release-tests.json")
    transports = {n.name: LocalTransport(n.name) for n in cluster.nodes}
    with pytest.raises(SpecError, match=r"config/release-tests\.json \(kept as .*kind"):
        classification_for(cluster, settings, transports, GateFiles(tmp_path / "out"))
