"""Who holds a cluster's concurrency slot: the process, its host and run, kept with the slot.

Prefect's lease on a slot names at most a run id, and a holder that stopped renewing it is found
only when the lease runs out (a minute, and the server's repossessor after that). So the holder
records itself beside the slot: host (and the host's boot id), pid and the process's start time,
the run, the command and the lease. A refusal and `cluster status` then name who holds the
cluster, and a waiting run on the same host sees at once that the holder is gone (no such
process, or the pid now belongs to another process) and gives its lease back, instead of waiting
for the lease to run out. A stopped (SIGSTOP) holder is named as stopped; its lease runs out as
it renews nothing.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

Liveness = Literal["running", "stopped", "gone", "elsewhere"]
"""What this host can tell of a holder: `elsewhere` when it is another host's process."""

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class SlotHolder(BaseModel):
    """The process holding a cluster's slot, as it recorded itself when it took it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str
    boot_id: str
    pid: int
    started: int
    """The process's start time (clock ticks after boot): a reused pid has another."""
    lease_id: str
    run_id: str | None
    command: str
    since: datetime

    def describe(self, liveness: Liveness) -> str:
        """One line naming the holder, for refusals and `cluster status`."""
        command = f" running `{self.command}`" if self.command else ""
        run = f", run {self.run_id}" if self.run_id else ""
        state = {"elsewhere": "on another host"}.get(liveness, liveness)
        return (
            f"pid {self.pid} on {self.host}{command}{run}, since "
            f"{self.since:%Y-%m-%d %H:%M:%S} UTC ({state})"
        )


def this_process(*, pid: int, lease_id: str, run_id: str | None, command: str) -> SlotHolder:
    """The record of process `pid` of this host taking the slot under `lease_id`."""
    stat = _stat(pid)
    return SlotHolder(
        host=socket.gethostname(),
        boot_id=_boot_id(),
        pid=pid,
        started=stat[1] if stat else 0,
        lease_id=lease_id,
        run_id=run_id,
        command=command,
        since=datetime.now(UTC),
    )


def liveness(holder: SlotHolder) -> Liveness:
    """Whether the holder still runs, judged from /proc when it is a process of this host
    (same host name and boot); `elsewhere` for any other."""
    if holder.host != socket.gethostname() or holder.boot_id != _boot_id():
        return "elsewhere"
    stat = _stat(holder.pid)
    if stat is None or stat[1] != holder.started or stat[0] in "ZX":
        return "gone"
    return "stopped" if stat[0] in "Tt" else "running"


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of a process of this host, None when there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # the name in parentheses may hold spaces
    return fields[0], int(fields[19])


def _boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""
