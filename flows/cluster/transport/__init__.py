"""Transports: how the pipeline reaches a node (`local` subprocesses or `ssh` with paramiko)."""

from __future__ import annotations

from flows.cluster.transport.base import CommandResult, Transport, shell_command
from flows.cluster.transport.local import LocalTransport
from flows.cluster.transport.ssh import SshSettings, SshTransport

__all__ = [
    "CommandResult",
    "LocalTransport",
    "SshSettings",
    "SshTransport",
    "Transport",
    "shell_command",
]
