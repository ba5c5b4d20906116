"""A running command's output, line by line as it comes: what a person watching it sees."""

from __future__ import annotations

import subprocess
import threading


class OutputLines:
    """The lines `process` printed so far (a thread drains its stdout; `close` ends that)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.append(line.rstrip("\n"))

    def said(self) -> list[str]:
        """Every line so far."""
        return list(self._lines)

    def containing(self, text: str) -> str:
        """The first line so far with `text` in it ("" before it is printed)."""
        return next((line for line in self.said() if text in line), "")

    def close(self) -> str:
        """After the process ended (or was killed): every line, joined; the pipe closed."""
        self._reader.join(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return "\n".join(self._lines)
