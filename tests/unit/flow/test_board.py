"""The stage board: statuses, times, and progress inside a running stage."""

from __future__ import annotations

import io

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
