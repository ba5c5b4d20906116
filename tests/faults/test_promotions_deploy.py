"""Faults during `promote --deploy`: it died on SIGTERM with the pointer already switched to a
release that was never deployed, and an unexpected exception in the deploy skipped the rollback.
Now SIGTERM unwinds like Ctrl-C and puts the pointer back, and any exception is a failed deploy
that is rolled back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flows.settings import prefect_environment

prefect_environment()

from flows.cli import main  # noqa: E402
from flows.promotion import promote  # noqa: E402
from flows.promotion.models import PromotedEntry  # noqa: E402
from flows.promotion.store import read_log, read_pointer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = str(ROOT / "config/local.yaml")
SCRIPT = Path(__file__).with_name("deploying_promoter.py")


def _entry(release_file: Path, *, by: str, reason: str, **_: object) -> PromotedEntry:
    return PromotedEntry(
        release=release_file.stem, release_file=str(release_file), build_digest="a" * 64,
        record=f"experiments/{release_file.stem}", at=datetime.now(UTC), by=by, reason=reason,
    )  # fmt: skip


@pytest.fixture
def project_releases() -> str:
    """The shared `project` fixture (tests/conftest.py) with the shipped r1 and r2 in it."""
    return "shipped"


def test_sigterm_during_deploy_puts_the_pointer_back(project: Path) -> None:
    monkey = pytest.MonkeyPatch()
    monkey.setattr(promote, "checked_entry", _entry)
    try:
        assert main(["promote", "r1", "--by", "op"]) == 0
    finally:
        monkey.undo()
    mark = project / "deploying"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'engine'}"}
    child = subprocess.Popen(
        [sys.executable, str(SCRIPT), "r2", CLUSTER, str(mark)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not mark.exists():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        pointer = read_pointer(project)
        assert pointer is not None
        assert pointer.current.release == "r2"  # switched, the deploy is under way
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 130, err
    pointer = read_pointer(project)
    assert pointer is not None
    assert pointer.current.release == "r1", "the pointer names a release that was never deployed"
    assert pointer.history == []
    log = read_log(project)
    assert [(e.action, e.release) for e in log][-1] == ("rolled-back", "r2")
    assert "interrupted" in log[-1].detail


def test_an_unexpected_exception_in_deploy_rolls_back(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(promote, "checked_entry", _entry)
    assert main(["promote", "r1", "--by", "op"]) == 0
    deployed: list[str] = []

    def deploy(_cluster: object, entry: PromotedEntry, **_: object) -> tuple[None, list[str]]:
        deployed.append(entry.release)
        if entry.release == "r2":
            raise KeyError("the runtime broke in an unexpected way")
        return None, []

    monkeypatch.setattr(promote, "deploy", deploy)
    assert main(["promote", "r2", "--deploy", "-c", CLUSTER, "--by", "op"]) == 1
    assert deployed == ["r2", "r1"]
    pointer = read_pointer(project)
    assert pointer is not None
    assert pointer.current.release == "r1"
    actions = [(e.action, e.release) for e in read_log(project)]
    assert actions[-2:] == [("deploy-failed", "r2"), ("rolled-back", "r1")]
    assert "KeyError" in read_log(project)[-2].detail
