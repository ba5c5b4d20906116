"""A command waiting for a long local child (as for pytest, pip or a model preparation).

`python local_command_holder.py PID_FILE` runs, through the local transport, a shell that
writes the pid of its own long `sleep` child to PID_FILE; the test then interrupts us.
"""

from __future__ import annotations

import contextlib
import sys

from flows.cluster.transport.local import LocalTransport

try:
    from flows.commands.signals import terminate_as_interrupt
except ImportError:  # before the fix
    terminate_as_interrupt = contextlib.nullcontext  # type: ignore[assignment]

if __name__ == "__main__":
    script = f"sleep 300 & echo $! > {sys.argv[1]}.tmp && mv {sys.argv[1]}.tmp {sys.argv[1]}; wait"
    with terminate_as_interrupt():
        try:
            LocalTransport("local").run(["sh", "-c", script], timeout=600)
        except KeyboardInterrupt:
            sys.exit(130)
