"""The decision prompt a waiting qualification shows: commands that run when pasted, the wait,
and, on a Prefect server, its URL; and the commands really run (here, with nothing waiting)."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from flows.cli import main
from flows.pipeline import embedded
from flows.pipeline.embedded import SERVERS_DIR
from flows.promotion import paused
from flows.promotion.paused import decision_prompt

ROOT = Path(__file__).resolve().parents[3]


def _commands(prompt: str) -> list[list[str]]:
    """The prompt's command lines, split as a shell splits them."""
    return [shlex.split(line) for line in prompt.splitlines() if line.startswith("  ")]


def test_the_prompt_shows_both_commands_the_wait_and_no_server_when_embedded(
    project: Path,
) -> None:
    cluster = project / "config/local.yaml"
    prompt = decision_prompt("r1", str(project / "releases/r1.yaml"), str(cluster), 86400)
    first, *_ = prompt.splitlines()
    assert first.startswith("r1 waits for your decision, up to 24 h (promotion.timeout_s")
    assert _commands(prompt) == [
        ["sparkgate", "approve", "r1", "-c", "local"],
        ["sparkgate", "reject", "r1", "-c", "local", "--reason", "..."],
    ]
    assert "PREFECT_API_URL" not in prompt  # `approve` finds the embedded server by itself
    assert "Prefect UI" not in prompt  # the embedded server has no UI


def test_files_outside_the_project_folders_are_named_by_path_and_quoted(
    project: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("my clusters") / "tri.yaml"
    inside = project / "trial/r9.yaml"
    prompt = decision_prompt("r9", str(inside), str(elsewhere), 90)
    assert "up to 90 s" in prompt
    approve, reject = _commands(prompt)
    assert approve == ["sparkgate", "approve", "trial/r9.yaml", "-c", str(elsewhere)]
    assert reject[:5] == ["sparkgate", "reject", "trial/r9.yaml", "-c", str(elsewhere)]


def test_on_a_server_the_commands_carry_its_url_and_the_ui_form_is_named(project: Path) -> None:
    url = "http://prefect.lab:4200/api"
    link = "http://prefect.lab:4200/runs/flow-run/abc"
    prompt = decision_prompt(
        "r2", str(project / "releases/r2.yaml"), None, 7200, server=url, ui_link=link
    )
    assert "up to 2 h" in prompt
    assert _commands(prompt) == [
        [f"PREFECT_API_URL={url}", "sparkgate", "approve", "r2"],
        [f"PREFECT_API_URL={url}", "sparkgate", "reject", "r2", "--reason", "..."],
    ]
    assert prompt.splitlines()[-1] == f"or answer the Resume form in the Prefect UI: {link}"


def test_the_reject_command_runs_as_printed(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pasted with nothing waiting, it gets as far as looking for the run: the release and
    cluster it names resolve, the options parse, and the refusal says how to point at a
    server."""
    shutil.copytree(ROOT / "config", project / "config")  # local.yaml and what it extends
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr(embedded, "servers_dir", lambda: project / SERVERS_DIR)
    monkeypatch.setattr(paused, "served_dir", lambda: project / paused.SERVED_DIR)
    prompt = decision_prompt(
        "r1", str(project / "releases/r1.yaml"), str(project / "config/local.yaml"), 60
    )
    reject = _commands(prompt)[1]
    assert reject[0] == "sparkgate"
    assert main(reject[1:]) == 1
    said = capsys.readouterr().err
    assert "no paused qualification of r1 is waiting for a decision" in said
    assert "PREFECT_API_URL=" in said
