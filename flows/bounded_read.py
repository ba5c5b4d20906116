"""Reading a file a user names, bounded: only a regular file, and only so much of it.

A path on the command line or in a spec can name a FIFO (the read waits forever for a writer),
a device (/dev/zero never ends) or a file of gigabytes (read whole, it costs twice its size in
memory). Every such read goes through here: the file is opened without blocking, checked on its
descriptor (so nothing can be swapped in between), and at most `limit` + 1 bytes are read, so the
caller can tell "too large" from "exactly at the limit".
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from flows.errors import SpecError


def read_regular(path: Path, limit: int) -> bytes:
    """At most `limit` + 1 bytes of `path`; SpecError if it is not a regular file.

    OSError (missing file, permissions; IsADirectoryError for a folder) is left to the caller,
    which knows how to name it.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(mode):
            raise SpecError("not a regular file (a FIFO, device or socket)", file=path)
        with os.fdopen(fd, "rb", closefd=False) as stream:
            return stream.read(limit + 1)
    finally:
        os.close(fd)


def is_file(path: Path) -> bool:
    """Path.is_file for a name a user typed: one the system cannot even look up (a component
    over NAME_MAX, 255 bytes) is no file either, instead of an OSError traceback."""
    try:
        return path.is_file()
    except OSError:
        return False


def printable(text: str) -> str:
    """`text` safe for a terminal: control characters (ANSI escapes, carriage returns, C1
    codes) are shown as escapes instead of being obeyed."""
    return "".join(
        char if char.isprintable() or char == "\t" else repr(char)[1:-1] for char in text
    )
