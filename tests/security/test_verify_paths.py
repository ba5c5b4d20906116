"""Attack: `verify` hashed files outside the record (issue 30, low: "`verify` hashes paths
outside the record (absolute entries accepted)").

record.json is the attacker's to edit: an entry naming `/etc/...`, `../..` or a link leading out
made verify read and hash that file, and a matching hash let a record "verify" against, or
probe, files it does not hold. Now every such entry is refused by name, before anything is read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from flows.fileio import sha256_file
from flows.record import verify
from flows.record.writer import RecordWriter
from tests.support.records import (  # noqa: F401 - fixtures used by name
    cluster,
    published,
    release_r2,
)

OUTSIDE = "lies outside the record folder (refused, not read)"


def _name_in_files(record_folder: Path, name: str, sha256: str) -> None:
    """Make the release_tests stage list `name` (with `sha256`) among its raw files."""
    record_file = record_folder / "record.json"
    record = json.loads(record_file.read_text())
    record["stages"]["release_tests"]["files"].append({"path": name, "sha256": sha256, "bytes": 17})
    record_file.write_text(json.dumps(record))


def _entry(name: str, file: Path) -> dict[str, object]:
    return {"path": name, "sha256": sha256_file(file), "bytes": file.stat().st_size}


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file beside, not inside, the experiments folder."""
    file = tmp_path / "secret.txt"
    file.write_text("not the record's\n")
    return file


def test_an_absolute_entry_is_refused_by_name(
    published: Callable[..., RecordWriter],  # noqa: F811
    secret: Path,
) -> None:
    path = published().path
    _name_in_files(path, str(secret), sha256_file(secret))
    assert verify(path) == [f"release_tests: {str(secret)!r} {OUTSIDE}"]


def test_an_entry_climbing_out_with_dotdot_is_refused_by_name(
    published: Callable[..., RecordWriter],  # noqa: F811
    secret: Path,
) -> None:
    path = published().path
    climb = "release_tests/../../../secret.txt"
    assert (path / climb).resolve() == secret.resolve()
    _name_in_files(path, climb, sha256_file(secret))
    assert verify(path) == [f"release_tests: {climb!r} {OUTSIDE}"]


def test_an_entry_whose_link_leads_out_is_refused_by_name(
    published: Callable[..., RecordWriter],  # noqa: F811
    secret: Path,
) -> None:
    path = published().path
    (path / "release_tests" / "linked.txt").symlink_to(secret)
    _name_in_files(path, "release_tests/linked.txt", sha256_file(secret))
    assert verify(path) == [f"release_tests: 'release_tests/linked.txt' {OUTSIDE}"]


def test_an_absolute_plot_and_extra_are_refused_by_name(
    published: Callable[..., RecordWriter],  # noqa: F811
    secret: Path,
) -> None:
    path = published().path
    record = json.loads((path / "record.json").read_text())
    record["plots"].append(_entry(str(secret), secret))
    record["extras"].append(_entry("../../secret.txt", secret))
    (path / "record.json").write_text(json.dumps(record))
    assert verify(path) == [
        f"extra file: '../../secret.txt' {OUTSIDE}",
        f"plot: {str(secret)!r} {OUTSIDE}",
    ]
