"""Faults: the guard the SSH transport wraps a remote command in, run by a real `sh` here as
sshd runs it on a node (output to pipes whose other end the reader holds).

At its timeout coreutils `timeout` ends the command's process group only; a daemon the command
left in a session of its own kept running, holding the output (issue 30, med: "a daemonized
grandchild keeps the stage blocked past its timeout"). The guard then kills each process holding
the write end of its output, never the reader (here: this test process; on a node: sshd).
The same over real sshd hosts: tests/lab/test_ssh_command_bounds.py.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from flows.cluster.transport.base import guarded_command

DAEMON_SLEEP = "46.75"  # an argument no other process here has


def _daemons() -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:2] == [b"sleep", DAEMON_SLEEP.encode()]:
            found.append(cmdline.parent.name)
    return found


def test_a_timed_out_command_s_daemon_is_killed_and_its_reader_is_not() -> None:
    script = f"setsid sleep {DAEMON_SLEEP} & echo building; sleep 40"
    text = guarded_command(["sh", "-c", script], limit_s=2, kill_after_s=1)
    began = time.monotonic()
    done = subprocess.run(["sh", "-c", text], capture_output=True, timeout=30, check=False)
    assert done.returncode == 124  # timeout's status, passed on
    assert done.stdout == b"building\n"
    assert time.monotonic() - began < 10  # the daemon would hold the pipes for 46 s
    assert _daemons() == []


def test_a_command_that_ends_in_time_keeps_its_status_and_output() -> None:
    text = guarded_command(
        ["sh", "-c", "echo out; echo err >&2; exit 3"], limit_s=10, kill_after_s=1
    )
    done = subprocess.run(["sh", "-c", text], capture_output=True, timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (3, b"out\n", b"err\n")
