"""What one command may cost the driver, whichever transport runs it: the end of its output only.

A build command's log can be hundreds of megabytes (300 MB held whole cost ~900 MiB of memory);
a command's result keeps the last `OUTPUT_KEPT` bytes of each stream, after a line saying how
much was cut, so an error message and an `image_line` still see the end of the log.
"""

from __future__ import annotations

OUTPUT_KEPT = 16 << 20
"""The most of each output stream a command's result keeps: its end."""


class OutputTail:
    """The last `limit` bytes written to it, and how many bytes before them were dropped."""

    def __init__(self, limit: int = OUTPUT_KEPT) -> None:
        self.limit = limit
        self.cut = 0
        self._kept = bytearray()

    def add(self, chunk: bytes) -> None:
        """Append a chunk, dropping from the front what goes over the limit."""
        self._kept += chunk
        over = len(self._kept) - self.limit
        if over > 0:
            self.cut += over
            del self._kept[:over]

    def value(self) -> bytes:
        """What was kept, after a line naming how much was cut (when anything was)."""
        head = f"[... {self.cut} bytes cut ...]\n".encode() if self.cut else b""
        return head + bytes(self._kept)

    def text(self) -> str:
        """`value()` decoded, undecodable bytes replaced."""
        return self.value().decode(errors="replace")
