"""The Prefect servers a test's runs started, found by the state folder in their environment."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SERVER_MARKS = ("prefect.server.api.server:create_app", "embedded_server.py")


@dataclass(frozen=True)
class ServerProcess:
    """One Prefect server process: its pid and command line."""

    pid: int
    args: str


def prefect_servers(state: Path) -> list[ServerProcess]:
    """Every live Prefect server (ours or Prefect's temporary one) whose environment names
    `state` (a test's SPARKGATE_STATE_DIR or PREFECT_HOME), as `ps` would list them."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (proc / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if any(mark in args for mark in SERVER_MARKS) and str(state).encode() in environ:
            found.append(ServerProcess(int(proc.name), args.strip()))
    return found
