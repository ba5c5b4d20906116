"""A qualification's inputs are loaded and checked once: by the command, for flow and plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main
from flows.cluster.runtime import factory
from flows.pipeline import inputs as inputs_module
from flows.pipeline.inputs import given_inputs, inputs_for, load_inputs

ROOT = Path(__file__).resolve().parents[3]
R1, R2 = ROOT / "releases" / "r1.yaml", ROOT / "releases" / "r2.yaml"
LOCAL = ROOT / "config" / "local.yaml"


def test_loading_reads_release_previous_cluster_and_suite() -> None:
    loaded = load_inputs(R2, LOCAL)
    assert (loaded.release.name, loaded.previous and loaded.previous.name) == ("r2", "r1")
    assert loaded.shape == loaded.cluster.shape == "tp2-local"
    assert loaded.suite is not None
    assert loaded.suite.workloads


def test_the_flow_takes_the_inputs_the_command_built_for_the_same_files() -> None:
    built = load_inputs(R2, LOCAL)
    token = given_inputs.set(built)
    try:
        assert inputs_for(R2, LOCAL) is built  # not loaded again
        other = inputs_for(R1, LOCAL)  # other files (a deployment's run): loaded now
    finally:
        given_inputs.reset(token)
    assert other is not built
    assert other.release.name == "r1"


def test_the_command_checks_the_fit_once_for_the_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path))
    monkeypatch.setenv("SPARKGATE_STATE_DIR", str(tmp_path / ".sparkgate"))
    checked: list[str] = []

    def counted(cluster: object, release: object, *files: Path) -> None:
        checked.append(getattr(release, "name", "?"))
        factory.check_fits(cluster, release, *files)  # type: ignore[arg-type]

    monkeypatch.setattr(inputs_module, "check_fits", counted)
    assert main(["qualify", str(R2), "-c", str(LOCAL), "--plan", "--json"]) == 0
    assert '"release": "r2"' in capsys.readouterr().out
    assert checked == ["r2"]
