"""The command line's error boundary: a usage mistake is one message and exit 2, no traceback."""

from __future__ import annotations

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
