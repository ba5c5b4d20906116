"""The stage board: statuses, times, and progress inside a running stage."""

from __future__ import annotations

import io
import re

from rich.console import Console

from flows.ui.board import StageBoard


def _text(board: StageBoard) -> str:
    out = Console(file=io.StringIO(), width=160, color_system=None)
    out.print(board.render())
    return out.file.getvalue()  # type: ignore[attr-defined,no-any-return]


def _plain_board() -> tuple[StageBoard, io.StringIO]:
    lines = io.StringIO()
    return StageBoard(Console(file=lines, width=160, color_system=None), "qualify r2"), lines


def test_a_running_stage_shows_its_progress_until_it_finishes() -> None:
    board, _ = _plain_board()
    board.started("benchmark")
    board.progressed("arm 2 samples", 7, 21)
    assert "arm 2 samples 7/21" in _text(board)
    board.finished("benchmark", "passed", "every point faster or level")
    shown = _text(board)
    assert "arm 2 samples" not in shown
    assert "every point faster or level" in shown


def test_progress_without_a_running_stage_is_ignored() -> None:
    board, _ = _plain_board()
    board.progressed("arm 1 samples", 1, 4)
    assert "arm 1 samples" not in _text(board)


def test_plain_output_prints_each_transition_once_and_no_progress_lines() -> None:
    board, lines = _plain_board()
    board.started("cold_boots")
    board.progressed("boots", 1, 4)
    board.progressed("boots", 2, 4)
    board.finished("cold_boots", "failed", "warm: boot failed")
    printed = lines.getvalue().splitlines()
    assert printed[0] == "cold boots: running"
    assert printed[1].startswith("cold boots: failed (")
    assert printed[1].endswith(" - warm: boot failed")
    assert len(printed) == 2
    assert board.statuses() == {"cold_boots": "failed"}


PROMPT = "r2 waits for your decision, up to 24 h.\n  sparkgate approve r2 -c local"


def _shown(console: Console) -> list[str]:
    """The non-empty lines a terminal board shows now (its current view), ends stripped."""
    return [line.rstrip() for line in console.export_text().splitlines() if line.strip()]


def test_on_a_terminal_the_prompt_is_the_last_thing_shown_with_the_time_waited() -> None:
    board = StageBoard(Console(file=io.StringIO(), width=120, force_terminal=True), "qualify r2")
    board.started("record")
    board.finished("record", "passed", "experiments/2026-12-06-r2")
    board.waiting(PROMPT)
    view = Console(file=io.StringIO(), width=120, color_system=None, record=True)
    view.print(board.view())
    shown = _shown(view)
    assert shown[-3:-1] == PROMPT.splitlines()  # below the table's last row, the record's
    assert "experiments/2026-12-06-r2" in shown[-5]
    assert shown[-1].startswith("waiting 0:00:0")  # the board visibly ticks while it waits
    board.note("promoting r2")  # answered: the prompt goes
    view = Console(file=io.StringIO(), width=120, color_system=None, record=True)
    view.print(board.view())
    assert "waits for your decision" not in view.export_text()


def test_a_terminal_too_short_for_both_shows_the_prompt_alone() -> None:
    short = Console(file=io.StringIO(), width=120, height=12, force_terminal=True)
    board = StageBoard(short, "qualify r2")
    board.waiting(PROMPT)
    view = Console(file=io.StringIO(), width=120, color_system=None, record=True)
    view.print(board.view())
    assert _shown(view)[:2] == PROMPT.splitlines()
    assert "cluster lock" not in view.export_text()


def test_the_live_board_keeps_the_prompt_below_the_table_while_it_waits() -> None:
    screen = io.StringIO()
    with StageBoard(Console(file=screen, width=120, force_terminal=True), "qualify r2") as board:
        board.finished("verdict", "passed", "qualified")
        board.waiting(PROMPT)
        drawn = screen.getvalue()
    last = drawn.rsplit("record", 1)[-1]  # after the table's last row, as last drawn
    assert "sparkgate approve r2 -c local" in last
    assert "waiting 0:00:0" in last


def test_plain_output_prints_the_prompt_last() -> None:
    board, lines = _plain_board()
    board.started("record")
    board.finished("record", "passed", "experiments/2026-12-06-r2")
    board.waiting(PROMPT)
    assert lines.getvalue().splitlines()[-2:] == PROMPT.splitlines()


def test_the_verdict_row_shows_its_status_not_the_verdict_said_once_at_the_end() -> None:
    board, lines = _plain_board()
    board.started("verdict")
    board.finished("verdict", "failed", "failed at benchmark: slower")
    assert "slower" not in lines.getvalue()
    assert "slower" not in _text(board)
    assert re.fullmatch(r"verdict: failed \(\d+\.\d s\)", lines.getvalue().splitlines()[-1])
