"""Faults: the SSH transport had no bound on a command's output, and a daemon a timed-out
command left on the node outlived it (issue 30, med: "`build.kind: command`: a daemonized
grandchild keeps the stage blocked past its timeout; output is unbounded").

Builds and release commands run on the head node over SSH. The transport kept every byte a
command printed (a 300 MB build log is 300 MB of memory in the driver, more once decoded), and
at a timeout the node's `timeout` guard ended only the command's process group: a grandchild
that called `setsid` kept running, holding the session's output, for as long as it liked. Now a
result keeps the last 16 MiB of each stream with a line saying how much was cut, as the local
transport does, and at a timeout the guard on the node also kills every process still holding
the command's output.

Against the lab's real sshd hosts (the namespaces share this machine's pids, so the daemon is
looked for in /proc here).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flows.cluster.transport.bounds import OUTPUT_KEPT
from flows.errors import TransportError
from tests.support.lab import Lab
from tests.support.waiting import wait_until

pytestmark = pytest.mark.lab

DAEMON_SLEEP = "47.25"  # an argument no other process here has
DAEMONIZES = ["sh", "-c", f"setsid sleep {DAEMON_SLEEP} & echo building; sleep 40"]


def _daemons() -> list[int]:
    """Pids of this machine's processes running `sleep DAEMON_SLEEP`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if argv[:2] == [b"sleep", DAEMON_SLEEP.encode()]:
            found.append(int(cmdline.parent.name))
    return found


def test_a_daemonized_grandchild_does_not_outlive_the_command_s_timeout(lab: Lab) -> None:
    transport = lab.transport(0)
    try:
        began = time.monotonic()
        with pytest.raises(TransportError, match=r"`sh` timed out after 2 s"):
            transport.run(DAEMONIZES, timeout=2)
        assert time.monotonic() - began < 15
        assert _daemons(), "the command should have left its daemon running at the timeout"
        wait_until(
            lambda: not _daemons(), 15,
            "the daemon the timed-out command left on the node to be killed", interval_s=0.2,
        )  # fmt: skip
        assert transport.run(["true"]).ok  # the connection is still usable
    finally:
        transport.close()


def test_a_command_s_output_is_kept_to_a_bounded_tail(lab: Lab) -> None:
    """24 MiB of output keeps its last 16 MiB and says how much was cut (it was kept whole)."""
    size = 24 << 20
    noisy = ["sh", "-c", f"head -c {size} /dev/zero | tr '\\0' a; echo; echo END; echo err >&2"]
    transport = lab.transport(1)
    try:
        result = transport.run(noisy, timeout=240)
    finally:
        transport.close()
    assert result.ok
    assert len(result.stdout) <= OUTPUT_KEPT + 64
    assert result.stdout.startswith(f"[... {size + 1 + 4 - OUTPUT_KEPT} bytes cut ...]\n")
    assert result.stdout.endswith("a\nEND\n")
    assert result.stderr == "err\n"  # a short stream is kept whole, with no cut line
