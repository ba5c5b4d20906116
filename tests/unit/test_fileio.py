"""One atomic writer with one mode per caller: records and gate files shared, state private.

Before there was one writer, two `write_text` helpers of the same name wrote 0600 and 0644, and
the gates' raw files inside a record (written through the 0600 one) could not be read by the
people the record is committed for.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flows.cluster.boot.session import ClusterSession, save_session
from flows.cluster.boot.timeline import BootTimeline
from flows.errors import DiskFullError
from flows.fileio import PRIVATE_MODE, write_text
from flows.gates.files import GateFiles


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_gates_raw_files_are_shared_like_the_record_they_belong_to(tmp_path: Path) -> None:
    files = GateFiles(tmp_path / "record" / "determinism")
    files.write_json("scenarios/alone.json", {"tokens": [1, 2]})
    write_text(tmp_path / "record" / "README.md", "# r2\n")  # as flows.record writes it
    assert mode_of(tmp_path / "record" / "determinism" / "scenarios" / "alone.json") == 0o644
    assert mode_of(tmp_path / "record" / "README.md") == 0o644
    assert importlib.util.find_spec("flows.record.atomic") is None, "no second writer for records"


def test_a_boot_session_naming_hosts_is_private(tmp_path: Path) -> None:
    now = datetime(2026, 12, 6, tzinfo=UTC)
    session = ClusterSession(
        cluster="local", release="r2", runtime="process", build="sha256:d", started_at=now,
        handles=[], timeline=BootTimeline(started_at=now, ready_s=None, ranks=[]),
    )  # fmt: skip
    assert mode_of(save_session(tmp_path, session)) == 0o600


def test_private_is_said_where_written(tmp_path: Path) -> None:
    write_text(tmp_path / "state.json", "{}", mode=PRIVATE_MODE)
    write_text(tmp_path / "shared.txt", "x")
    assert (mode_of(tmp_path / "state.json"), mode_of(tmp_path / "shared.txt")) == (0o600, 0o644)


def test_a_full_disk_says_the_previous_version_is_intact_and_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "state.json"
    write_text(target, "old", mode=PRIVATE_MODE)

    def full(handle: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(
        DiskFullError, match=r"state.json: cannot write, .*previous version is intact"
    ):
        write_text(target, "new", mode=PRIVATE_MODE)
    with pytest.raises(DiskFullError, match=r"other.json: cannot write, .*it was not created"):
        write_text(tmp_path / "other.json", "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
