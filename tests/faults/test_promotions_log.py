"""Faults in the promotions log and the pointer files (issue 30: "The promotion log loses an
entry on a short write and the next append leaves an unparseable line; reading the log then
raises"; "every write outside the atomic record writer checked for short writes and ENOSPC").

A short write and ENOSPC come from a real filesystem: a 64 KiB tmpfs (root only) whose free
pages are all taken, so an append that crosses the log's last page writes up to the page's end
and stops there. A torn line from an earlier crash is written as such a crash leaves it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from flows.errors import MachineError
from flows.promotion.models import LOG_FILE, LogEntry, Pointer, PromotedEntry
from flows.promotion.store import append_log, load_log, read_log, read_pointer, write_pointer
from tests.support.disk import fill

PAGE = 4096
MACHINE = "a failure of this machine, not of the release"


def _entry(release: str, reason: str = "") -> LogEntry:
    return LogEntry(
        at=datetime(2026, 12, 6, 3, tzinfo=UTC), action="promoted", release=release, by="op",
        reason=reason, cluster="local",
    )  # fmt: skip


def _line(entry: LogEntry) -> bytes:
    return entry.model_dump_json().encode() + b"\n"


def _filling_the_page(release: str, size: int) -> LogEntry:
    """An entry whose line is `size` bytes long (its reason pads it)."""
    return _entry(release, "x" * (size - len(_line(_entry(release)))))


def test_a_short_write_on_a_full_disk_leaves_no_torn_line_and_says_it_is_the_machine(
    small_disk: Path,
) -> None:
    """Before: the append wrote up to the page's end, said nothing, and the next entry was
    glued to the torn one; reading the log then raised."""
    first = _filling_the_page("r1", PAGE - 40)  # 40 bytes left in the log's page
    append_log(small_disk, first)
    log = small_disk / LOG_FILE
    fill(small_disk)
    with pytest.raises(
        MachineError, match=rf"No space left on device; the log is as it was \({MACHINE}\)"
    ):
        append_log(small_disk, _entry("r2", "lost to a full disk"))
    assert log.stat().st_size == PAGE - 40, "a torn line was left in the log"
    (small_disk / "filler").unlink()
    append_log(small_disk, _entry("r3"))
    read = load_log(small_disk)
    assert [e.release for e in read.entries] == ["r1", "r3"]
    assert read.damaged == []


def test_a_torn_last_line_from_a_crash_is_skipped_named_and_never_swallows_the_next_entry(
    tmp_path: Path,
) -> None:
    """Before: reading a log whose last line a crash tore raised, and the next append was glued
    to the torn line (that entry lost too)."""
    log = tmp_path / LOG_FILE
    log.parent.mkdir()
    log.write_bytes(_line(_entry("r1")) + _line(_entry("r2"))[:50])  # the crash: half a line
    read = load_log(tmp_path)
    assert [e.release for e in read.entries] == ["r1"]
    assert read.damaged == [f"{log}:2: a torn last line skipped (50 bytes)"]
    append_log(tmp_path, _entry("r3"))
    read = load_log(tmp_path)
    assert [e.release for e in read.entries] == ["r1", "r3"], "the entry after the torn line"
    assert read.damaged == [f"{log}:2: a torn fragment skipped (50 bytes)"]
    assert log.read_bytes().endswith(_line(_entry("r3")))


def test_an_entry_glued_to_a_torn_line_by_an_older_append_is_still_read(tmp_path: Path) -> None:
    """What appends before this fix left: a torn fragment and a whole entry on one line."""
    log = tmp_path / LOG_FILE
    log.parent.mkdir()
    log.write_bytes(_line(_entry("r1")) + _line(_entry("r2"))[:50] + _line(_entry("r3")))
    read = load_log(tmp_path)
    assert [e.release for e in read.entries] == ["r1", "r3"]
    assert read.damaged == [f"{log}:2: a torn fragment skipped (50 bytes)"]
    assert read_log(tmp_path) == read.entries


def test_a_pointer_write_on_a_full_disk_is_the_machines_failure_and_keeps_the_pointer(
    small_disk: Path,
) -> None:
    """Before: a RecordError, as if a record had failed; now the machine's, the pointer kept."""
    entry = PromotedEntry(
        release="r1", release_file="releases/r1.yaml", build_digest="a" * 64,
        record="experiments/r1", at=datetime(2026, 12, 6, tzinfo=UTC), by="op", reason="",
    )  # fmt: skip
    write_pointer(small_disk, Pointer(current=entry))
    fill(small_disk)
    moved = Pointer(current=entry.model_copy(update={"release": "r2", "reason": "y" * PAGE}))
    with pytest.raises(
        MachineError, match=rf"No space left on device; the pointer is as it was \({MACHINE}\)"
    ):
        write_pointer(small_disk, moved)
    pointer = read_pointer(small_disk)
    assert pointer is not None
    assert pointer.current.release == "r1"
    assert [p.name for p in (small_disk / "config/promoted").iterdir()] == ["local.yaml"]


def test_a_promotion_the_log_cannot_record_is_undone_and_blamed_on_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pointer moved, then the log could not be opened (here: a folder in its place): the
    pointer is put back, so no promotion goes unlogged, and the error names the machine."""
    from flows.cli import main  # noqa: PLC0415
    from flows.promotion import promote  # noqa: PLC0415

    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path))
    monkeypatch.setenv("SPARKGATE_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "releases").mkdir()
    (tmp_path / "releases/r1.yaml").write_text("name: placeholder\n")
    entry = PromotedEntry(
        release="r1", release_file="releases/r1.yaml", build_digest="a" * 64,
        record="experiments/r1", at=datetime(2026, 12, 6, tzinfo=UTC), by="op", reason="",
    )  # fmt: skip
    monkeypatch.setattr(promote, "checked_entry", lambda *_a, **_k: entry)  # never built
    (tmp_path / LOG_FILE).mkdir(parents=True)
    assert main(["promote", "r1", "--by", "op"]) == 1
    error = " ".join(capsys.readouterr().err.split())
    assert "cannot open the log: Is a directory" in error
    assert MACHINE in error
    assert "the pointer was put back" in error
    assert read_pointer(tmp_path) is None
