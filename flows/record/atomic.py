"""Atomic, durable file writes for records: the previous version survives any failed write.

Each file goes to a temporary sibling, is flushed and fsynced, renamed over its target, and then
the folder itself is fsynced, so after a crash or power loss the target is the old version or
the new one and the rename is on disk. A write that fails for lack of space (ENOSPC, EDQUOT)
removes its temporary file and raises a RecordError that says the previous version is intact,
instead of an OSError traceback. Record files are 0644: records are meant to be committed and
read by others, so the 0600 of `mkstemp` is wrong for them.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from flows import fileio
from flows.errors import RecordError
from flows.fileio import dump_json, fsync_dir, sha256_file

__all__ = ["dump_json", "fsync_dir", "sha256_file", "write_bytes", "write_json", "write_text"]

FILE_MODE = 0o644
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}


def write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file, a rename and a folder fsync.

    Raises:
        RecordError: when the disk (or quota) is full; `path` then still holds its old content.
    """
    try:
        fileio.write_bytes(path, data, mode=FILE_MODE)
    except OSError as error:
        if error.errno in _NO_SPACE:
            state = "its previous version is intact" if path.exists() else "it was not created"
            message = f"{path}: cannot write, {os.strerror(error.errno)}; {state}"
            raise RecordError(message) from error
        raise


def write_text(path: Path, text: str) -> None:
    """Write UTF-8 text atomically and durably."""
    write_bytes(path, text.encode())


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically and durably in the one layout."""
    write_text(path, dump_json(data))
