"""Stage events: the flow's own clock keeps statuses and times and forwards every event."""

from __future__ import annotations

import pytest

from flows.pipeline.events import (
    NullObserver,
    StageClock,
    Tee,
    current_observer,
    observer_of_run,
)
from flows.stages import StageObserver
from flows.ui.board import StageBoard


class Recorder:
    """An observer that keeps every event."""

    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def started(self, stage: str) -> None:
        self.events.append(("started", stage))

    def progressed(self, what: str, done: int, total: int) -> None:
        self.events.append(("progressed", what, done, total))

    def note(self, line: str) -> None:
        self.events.append(("note", line))

    def finished(self, stage: str, status: str, detail: str = "") -> None:
        self.events.append(("finished", stage, status, detail))


def test_the_clock_keeps_statuses_and_seconds_of_started_stages_and_forwards_all() -> None:
    seen = Recorder()
    clock = StageClock(seen)
    clock.finished("validate", "passed", "r2 on local")  # never started: shown, not timed
    clock.started("build")
    clock.progressed("files", 1, 2)
    clock.note("built")
    clock.finished("build", "cached", "abc123")
    assert clock.statuses() == {"build": "cached"}
    assert set(clock.seconds()) == {"build"}
    assert clock.seconds()["build"] >= 0
    assert seen.events == [
        ("finished", "validate", "passed", "r2 on local"),
        ("started", "build"),
        ("progressed", "files", 1, 2),
        ("note", "built"),
        ("finished", "build", "cached", "abc123"),
    ]


def test_the_board_and_the_null_observer_are_observers() -> None:
    from rich.console import Console  # noqa: PLC0415

    board = StageBoard(Console(quiet=True), "t")
    observers: list[StageObserver] = [NullObserver(), board]
    for observer in observers:
        observer.started("build")
        observer.progressed("files", 1, 2)
        observer.note("built")
        observer.finished("build", "passed", "abc123")
    row = board.rows["build"]
    assert (row.status, row.detail, row.counted) == ("passed", "abc123", None)
    assert row.seconds is not None
    assert row.seconds >= 0


def test_a_command_hands_its_observer_to_the_flow() -> None:
    seen = Recorder()
    token = current_observer.set(seen)
    try:
        tee = observer_of_run()
        assert isinstance(tee, Tee)
        assert tee.observers[0] is seen
        assert type(tee.observers[1]).__name__ == "PrefectLogObserver"
    finally:
        current_observer.reset(token)
    assert type(observer_of_run()).__name__ == "PrefectLogObserver"


def test_ctrl_c_marks_the_running_stage_interrupted_not_failed() -> None:
    from rich.console import Console  # noqa: PLC0415

    board = StageBoard(Console(quiet=True), "t")

    def interrupted_in_cold_boots() -> None:
        with board:
            board.started("determinism")
            board.finished("determinism", "passed")
            board.started("cold_boots")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted_in_cold_boots()
    assert board.rows["determinism"].status == "passed"
    assert board.rows["cold_boots"].status == "interrupted"
    assert board.rows["benchmark"].status == "not run"
