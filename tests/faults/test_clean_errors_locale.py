"""Fault: stderr matching assumed an English locale (issue 15, Low: "Stderr matching assumes an
English locale"). Every child command whose stderr we match runs with LC_ALL=C.

No translated catalogue is installed on the test machines, so these tests check the locale the
child really sees (a real process printing its LC_ALL), not a translated message.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

from flows.cluster.lab.hosts import _sh
from flows.cluster.transport.base import CommandResult
from flows.cluster.transport.ssh import SshTransport


def test_lab_admin_commands_run_in_the_c_locale(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    monkeypatch.setenv("LANG", "de_DE.UTF-8")
    done = _sh(["sh", "-c", 'echo "locale=$LC_ALL" >&2; exit 1'], tolerate="locale=C")
    assert done.stderr.strip() == "locale=C"


def test_ssh_kill_runs_in_the_c_locale() -> None:
    seen: dict[str, Any] = {}

    class Node:
        node = "n0"

        def run(self, argv: list[str], **options: Any) -> CommandResult:
            seen.update(options, argv=argv)
            return CommandResult(
                node="n0",
                argv=tuple(argv),
                rc=1,
                stdout="",
                stderr="kill: (-42): No such process\n",
                duration=0.0,
            )

    SshTransport.kill(Node(), 42, signal.SIGTERM)  # type: ignore[arg-type]
    assert seen["env"] == {"LC_ALL": "C"}
    assert seen["argv"] == ["kill", "-s", "TERM", "--", "-42"]
