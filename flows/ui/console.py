"""The rich consoles every command shares: human output on stderr, machine output on stdout."""

from __future__ import annotations

from rich.console import Console

err_console = Console(stderr=True)
out_console = Console()
