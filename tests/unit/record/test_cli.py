"""sparkgate records, show, verify and compare on real record folders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flows.cli import main
from flows.record.writer import RecordWriter, open_record
from flows.spec.cluster import Cluster
from flows.spec.release import Release


def test_verify_exits_0_when_clean_and_1_listing_problems(
    published: Callable[..., RecordWriter], capsys: pytest.CaptureFixture[str]
) -> None:
    path = published().path
    assert main(["verify", str(path)]) == 0
    assert "verified (4 stages" in capsys.readouterr().err
    (path / "benchmark/compare.json").unlink()
    assert main(["verify", str(path)]) == 1
    err = capsys.readouterr().err
    assert "1 problem(s)" in err
    assert "benchmark: benchmark/compare.json is missing" in err


def test_records_show_and_compare_by_name(
    published: Callable[..., RecordWriter],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # rich folds table cells on a narrow console
    first = published()
    second = published(digest="sha256:bbb")
    experiments = str(first.path.parent)
    assert main(["records", "--experiments", experiments, "--write-index"]) == 0
    out = capsys.readouterr()
    assert first.path.name in out.out
    assert second.path.name in out.out
    assert (first.path.parent / "README.md").is_file()
    assert main(["show", "r2", "--experiments", experiments, "--raw"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("# r2: passed")
    assert f"record `{second.path.name}`" in shown  # a release name means its newest record
    assert main(["compare", first.path.name, second.path.name, "--experiments", experiments]) == 0
    compared = capsys.readouterr().out
    assert "decode/prose-c1 step_ms" in compared
    assert "all-jit" in compared


def test_unknown_record_is_a_clean_error(tmp_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "nothing", "--experiments", str(tmp_path)]) == 1
    assert "nothing: no record by that path, folder name or release" in capsys.readouterr().err


def test_show_renders_a_record_in_progress(
    tmp_path: Path,
    release_r2: Release,
    cluster: Cluster,
    helpers: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    writer = open_record(
        tmp_path, release_r2, build_digest="d", cluster=cluster, previous="r1", today=helpers.day
    )
    helpers.fill(writer, ["release_tests"])
    assert main(["show", writer.path.name, "--experiments", str(tmp_path), "--raw"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("# r2: in progress")
    assert "| release_tests | passed | 3 passed, 0 failed |" in shown
