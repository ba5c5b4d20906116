"""Atomic file writes and file digests: a reader never sees half a file, a crash never leaves one.

Every file is written to a temporary sibling, flushed and fsynced, renamed over its target, and
then the folder itself is fsynced, so after a crash or power loss the target is the old version
or the new one and the rename is on disk. Records, raw gate files, sessions and lab state all
write through here, with one mode each caller can see: `SHARED_MODE` (0644, the default) for
records and the gates' raw files in them, which are committed and read by others;
`PRIVATE_MODE` (0600) for state that names hosts and paths. A write that fails for lack of space
(ENOSPC, EDQUOT) removes its temporary file and raises a `DiskFullError` that says whether the
previous version is intact, instead of an OSError traceback.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from flows.errors import DiskFullError

SHARED_MODE = 0o644
"""Records and the gates' raw files in them: committed and read by others."""

PRIVATE_MODE = 0o600
"""State that may name hosts and paths (boot sessions, lab hosts): its owner only."""

_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}


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


def write_bytes(path: Path, data: bytes, *, mode: int = SHARED_MODE) -> None:
    """Write `data` to `path` through a temporary file, a rename and a folder fsync.

    Raises:
        DiskFullError: when the disk (or quota) is full; `path` then still holds its old content.
    """
    try:
        _replace(path, data, mode)
    except OSError as error:
        if error.errno in _NO_SPACE:
            state = "its previous version is intact" if path.exists() else "it was not created"
            message = f"{path}: cannot write, {os.strerror(error.errno)}; {state}"
            raise DiskFullError(message) from error
        raise


def _replace(path: Path, data: bytes, mode: int) -> None:
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


def write_text(path: Path, text: str, *, mode: int = SHARED_MODE) -> None:
    """Write UTF-8 text atomically and durably (see the module docstring for `mode`)."""
    write_bytes(path, text.encode(), mode=mode)


def dump_json(data: Any) -> str:
    """The one JSON layout of written files: sorted keys, indented, newline-terminated."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_json(path: Path, data: Any, *, mode: int = SHARED_MODE) -> None:
    """Write JSON atomically and durably in the one layout."""
    write_text(path, dump_json(data), mode=mode)


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
