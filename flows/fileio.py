"""Atomic file writes and file digests: a reader never sees half a file, a crash never leaves one.

Every file is written to a temporary sibling, flushed to disk and renamed over its target, so
the target is either the old version or the new one. Records, sessions, lab state and raw gate
files all write through here.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def fsync_dir(folder: Path) -> None:
    """Make the renames and creations inside `folder` durable (a no-op where unsupported)."""
    try:
        handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError as error:
        if error.errno not in {errno.EINVAL, errno.EBADF}:  # filesystems without dir fsync
            raise
    finally:
        os.close(handle)


def write_bytes(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Write `data` to `path` through a temporary file, a rename and a folder fsync.

    The file gets `mode` (0600 by default: state may name hosts and paths; records pass 0644).
    """
    created = not path.parent.is_dir()
    path.parent.mkdir(parents=True, exist_ok=True)
    if created:
        fsync_dir(path.parent.parent)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            os.fchmod(stream.fileno(), mode)
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_text(path: Path, text: str) -> None:
    """Write UTF-8 text atomically."""
    write_bytes(path, text.encode())


def dump_json(data: Any) -> str:
    """The one JSON layout of written files: sorted keys, indented, newline-terminated."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically in the one layout."""
    write_text(path, dump_json(data))


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def marker_digest(text: str) -> str | None:
    """The `digest` a JSON marker file records (None when unreadable: redo the work)."""
    try:
        value = json.loads(text).get("digest")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None
