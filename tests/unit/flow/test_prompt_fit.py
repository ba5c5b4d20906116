"""The decision prompt at 80 columns: every command is copy-pasteable as the live board shows it.

Rendered as a terminal of COLUMNS=80 shows the live board: each command of the prompt
(`decision_prompt`, embedded and on a server) is one line, or, when wider than the terminal,
lines continued with ` \\` whose `sparkgate ...` part is whole; pasted into bash, the lines
shown run with exactly the command's words.
"""

from __future__ import annotations

import io
import shlex
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from flows.promotion.decision import accepting_hint
from flows.promotion.paused import decision_commands, decision_prompt
from flows.ui.board import StageBoard
from flows.ui.prompt import fit_command

SERVER = "http://127.0.0.1:4200/api"
UI = "http://127.0.0.1:4200/runs/flow-run/0d5f8e4c-3f3a-4a47-9d1c-6f0b1f3f2c11"


@pytest.fixture(autouse=True)
def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "50")


def _shown(prompt: str) -> list[str]:
    """The lines a terminal of $COLUMNS shows for the live board waiting with `prompt`."""
    terminal = Console(file=io.StringIO(), force_terminal=True)
    assert terminal.width == 80
    board = StageBoard(terminal, "qualify r2")
    board.waiting(prompt)
    screen = Console(file=io.StringIO(), width=terminal.width, color_system=None, record=True)
    screen.print(board.view())
    return [line.rstrip() for line in screen.export_text().splitlines()]


def _pasted(shown: list[str], command: str) -> list[str]:
    """The lines of `shown` that show `command`: its first line and those continuing it."""
    blocks: list[list[str]] = []
    for line in shown:
        if blocks and blocks[-1][-1].endswith(" \\"):
            blocks[-1].append(line)
        elif line.startswith("  ") and not line.startswith("   "):
            blocks.append([line])
    joined = {" ".join(part.strip().removesuffix(" \\") for part in b): b for b in blocks}
    assert command in joined, (command, blocks)
    return joined[command]


def _words_in_bash(lines: list[str]) -> list[str]:
    """The words `sparkgate` gets, the environment's URL first, when `lines` are pasted in bash."""
    script = 'sparkgate() { printf "%s\\n" "${PREFECT_API_URL:-}" "$@"; }\n' + "\n".join(lines)
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return ran.stdout.splitlines()


@pytest.mark.parametrize("server", [None, SERVER], ids=["embedded", "served"])
@pytest.mark.parametrize(
    "release", ["releases/r2.yaml", "experiments/candidates/nightly-2026-12-06/r2-fused-mlp.yaml"]
)
def test_each_command_is_whole_and_pasteable_at_80_columns(
    tmp_path: Path, server: str | None, release: str
) -> None:
    (tmp_path / "releases").mkdir()
    (tmp_path / "releases/r2.yaml").touch()
    file, cluster = str(tmp_path / release), str(tmp_path / "config/tp3-triangle-lab.yaml")
    prompt = decision_prompt("r2", file, cluster, 86400, server=server,
                             ui_link=UI if server else None)  # fmt: skip
    shown = _shown(prompt)
    assert all(len(line) <= 80 for line in shown), shown
    approve, reject = decision_commands(file, cluster, server=server)
    for command in (approve, f'{reject} --reason "..."'):
        lines = _pasted(shown, command)
        sparkgate = command[command.index("sparkgate ") :]
        if len(sparkgate) + 4 <= 80:  # the command itself fits: whole on one line
            assert any(line.strip() == sparkgate for line in lines), lines
        if len(command) + 2 <= 80:
            assert lines == [f"  {command}"]
        assert _words_in_bash(lines) == [server or "", *shlex.split(sparkgate)[1:]]
    assert shown[-1].startswith("waiting 0:00:0")


def test_the_hint_of_an_inconclusive_run_stays_below_the_prompt_with_its_command_whole() -> None:
    prompt = decision_prompt("r2", "releases/r2.yaml", None, 86400)
    terminal = Console(file=io.StringIO(), force_terminal=True)
    board = StageBoard(terminal, "qualify r2")
    board.waiting(prompt)
    board.waiting(accepting_hint("r2"))
    screen = Console(file=io.StringIO(), width=80, color_system=None, record=True)
    screen.print(board.view())
    shown = [line.rstrip() for line in screen.export_text().splitlines()]
    assert "  sparkgate approve releases/r2.yaml" in shown  # the prompt's commands stay
    assert '  sparkgate approve r2 --accept-inconclusive "REASON"' in shown


def test_a_line_that_is_not_a_command_is_left_to_wrap() -> None:
    prose = "r2 waits for your decision, " * 5
    assert fit_command(prose, 80) == [prose]
    assert fit_command("  sparkgate approve r2", 80) == ["  sparkgate approve r2"]
