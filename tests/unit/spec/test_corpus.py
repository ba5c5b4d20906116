"""Every bad spec file fails through the real CLI with exit 2 and its exact located message;
every shipped spec file validates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flows.cli import main

ROOT = Path(__file__).resolve().parents[3]
BAD = sorted((ROOT / "tests" / "data" / "bad").glob("*.yaml"))
LOCATED = re.compile(r"^tests/data/bad/[\w.-]+\.yaml:\d+: [^:]+: \S")
SHIPPED = sorted([*(ROOT / "config").rglob("*.yaml"), *(ROOT / "releases").rglob("*.yaml")])


def test_corpus_is_large_and_complete() -> None:
    assert len(BAD) >= 40
    missing = [path.name for path in BAD if not path.with_suffix(".expected").is_file()]
    assert missing == []


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_file_gives_exit_2_and_its_message(
    path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    relative = path.relative_to(ROOT)
    code = main(["validate", str(relative)])
    captured = capsys.readouterr()
    expected = path.with_suffix(".expected").read_text(encoding="utf-8").strip()
    assert code == 2
    assert captured.err.splitlines()[0] == expected
    assert LOCATED.match(expected), "not in the FILE:LINE: key.path: message form"
    assert "Traceback" not in captured.err + captured.out
    assert captured.err.splitlines()[-1] == "1 of 1 spec files are invalid"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_file_validates(
    path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    code = main(["validate", str(path.relative_to(ROOT))])
    assert code == 0, capsys.readouterr().err


def test_examples_reference_their_schema() -> None:
    examples = [
        *(ROOT / "config").glob("*.yaml"),
        *(ROOT / "config" / "engines").glob("*.yaml"),
        *(ROOT / "config" / "examples").glob("*.yaml"),
        *(ROOT / "releases").glob("r*.yaml"),
    ]
    for path in examples:
        first = path.read_text(encoding="utf-8").splitlines()[0]
        if path.name == "lab.yaml":  # written by `sparkgate lab up`
            continue
        assert first.startswith("# yaml-language-server: $schema="), path
        schema = first.split("=", 1)[1]
        assert (path.parent / schema).is_file(), path


def test_validate_recurses_into_directories(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["validate", "config", "releases"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert "config/local.yaml: ok (cluster)" in lines
    assert "releases/r2.yaml: ok (release)" in lines
