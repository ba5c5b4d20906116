"""`promote`/`rollback` say `already` when the pointer named that release before (issue 29)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from flows.cli import main
from flows.promotion import promote
from tests.support.promotion_records import DIGEST, GATE_NAMES, stage


def test_promoting_or_rolling_back_to_the_current_release_says_already(
    project: Path,
    write_record: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(project)
    monkeypatch.setattr(promote, "build_release", lambda *_a, **_k: SimpleNamespace(digest=DIGEST))
    write_record("r1", stages={name: stage(name) for name in GATE_NAMES})
    assert main(["promote", "r1", "--by", "alice"]) == 0
    first = capsys.readouterr().err
    assert "promoted on local: r1" in first
    assert "already" not in first
    assert main(["promote", "r1", "--by", "alice"]) == 0
    assert "already promoted on local: r1" in capsys.readouterr().err
    assert main(["rollback", "--by", "carol"]) == 0  # back to the earlier promotion of r1
    assert "already promoted on local: r1" in capsys.readouterr().err
