"""The command line's error boundary: a usage mistake is one message and exit 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.cli import main


def test_an_unexpected_argument_is_a_usage_error_with_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema", "config/schema"]) == 2
    err = capsys.readouterr().err
    assert "unexpected extra argument" in err
    assert "Traceback" not in err


def test_an_unknown_command_is_a_usage_error_with_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["no-such-command"]) == 2
    assert "No such command" in capsys.readouterr().err


def test_version_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("sparkgate ")


def test_a_fresh_clone_gets_no_prefect_home_warning(tmp_path: Path) -> None:
    env = {**os.environ, "SPARKGATE_STATE_DIR": str(tmp_path / "fresh" / "state")}
    env.pop("PREFECT_HOME", None)
    code = "from flows.settings import prefect_environment; prefect_environment(); import prefect"
    done = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", code],
        env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Failed to create the Prefect home" not in done.stderr
    assert (tmp_path / "fresh" / "state" / "prefect").is_dir()
