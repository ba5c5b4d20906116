"""Faults: a command that leaves a daemon behind kept its stage blocked past its timeout
(issue 30, med: "`build.kind: command`: a daemonized grandchild keeps the stage blocked past its
timeout").

The local transport runs a build command in a session of its own and kills that session's group
at the timeout, then waited for the command's output pipes to close; a grandchild that called
`setsid` left the group, kept the pipes and kept the stage waiting until it chose to exit. Now
the processes still holding the pipes are killed too, and the timeout is reported on time.
"""

from __future__ import annotations

import time

import pytest

from flows.cluster.transport.local import LocalTransport
from flows.errors import TransportError

OUTPUT_KEPT = 16 << 20  # flows.cluster.transport.bounds.OUTPUT_KEPT
DAEMONIZES = ["sh", "-c", "setsid sleep 40 & echo building; sleep 40"]


def test_a_daemonized_grandchild_does_not_hold_the_command_past_its_timeout() -> None:
    began = time.monotonic()
    with pytest.raises(TransportError, match=r"timed out after 2 s"):
        LocalTransport("node0").run(DAEMONIZES, timeout=2)
    assert time.monotonic() - began < 15  # the grandchild would hold it for 40 s


def test_a_command_output_is_kept_to_a_bounded_tail() -> None:
    """A build log of 64 MiB keeps its last 16 MiB and says how much was cut."""
    noisy = ["sh", "-c", "head -c 67108864 /dev/zero | tr '\\0' a; echo; echo END"]
    result = LocalTransport("node0").run(noisy, timeout=120)
    assert result.ok
    assert len(result.stdout) <= OUTPUT_KEPT + 64
    assert result.stdout.startswith(f"[... {67108864 + 1 + 4 - OUTPUT_KEPT} bytes cut ...]\n")
    assert result.stdout.endswith("a\nEND\n")
