"""One way to name releases and clusters in every command, and conventional help (issue 29)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from flows.cli import app, main
from flows.errors import SpecError
from flows.names import cluster_path, known_clusters, release_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _in_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKGATE_ROOT", str(ROOT))
    monkeypatch.chdir(ROOT)


def test_a_name_and_a_path_name_the_same_file() -> None:
    assert release_path("r2").resolve() == release_path("releases/r2.yaml").resolve()
    assert cluster_path("local").resolve() == cluster_path("config/local.yaml").resolve()
    assert "local" in known_clusters()
    assert "release-tests" not in known_clusters()  # a config file of another kind


def test_a_missing_path_is_never_turned_into_a_name_and_the_miss_lists_the_known_ones() -> None:
    with pytest.raises(SpecError) as missed:
        cluster_path("config/nosuch.yaml")
    text = str(missed.value)
    assert "config/config" not in text
    assert "nosuch.yaml.yaml" not in text
    assert "(local, local-tp3)" in text
    with pytest.raises(SpecError, match=r"no release 'r9' .*\(r1, r2\)"):
        release_path("r9")


def test_render_and_qualify_take_names_as_every_command_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["render", "r2", "-c", "local"]) == 0
    assert main(["qualify", "r2", "--plan"]) == 0
    capsys.readouterr()
    assert main(["render", "r9"]) == 2
    assert "(r1, r2)" in capsys.readouterr().err


def _commands(group: Any, prefix: list[str]) -> list[list[str]]:
    """Every command and subcommand (typer carries its own click: groups have `commands`)."""
    found = []
    for name, command in sorted(group.commands.items()):
        found.append([*prefix, name])
        if hasattr(command, "commands"):
            found += _commands(command, [*prefix, name])
    return found


def test_every_command_takes_h_and_shows_no_type_placeholders(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = typer.main.get_command(app)
    commands = _commands(root, [])
    assert len(commands) > 15
    for command in [[], *commands]:
        assert main([*command, "-h"]) == 0, command
        text = capsys.readouterr().out
        assert "Usage:" in text, command
        shown = re.findall(r"<(?:bool|str|int|float|Path|list\[[^\]]*\])>|\{[a-z_]+\}", text)
        assert not shown, (command, shown)


def test_the_venv_puts_sparkgate_on_path() -> None:
    """README: `source .venv/bin/activate` gives the shell this checkout's `sparkgate`."""
    venv = Path(sys.prefix)
    done = subprocess.run(
        ["bash", "-c", f"source {venv}/bin/activate && command -v sparkgate && sparkgate -h"],
        capture_output=True, text=True, check=False, cwd=ROOT, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"{venv}/bin/sparkgate"
    assert "Usage: sparkgate [OPTIONS] COMMAND [ARGS]..." in " ".join(done.stdout.split())
