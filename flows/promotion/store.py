"""The pointer files and the promotions log on disk: never half written, never lost to a race.

A pointer is always replaced by rename (temporary file, fsync, rename, folder fsync), so a
reader sees the old pointer or the new one; every read-modify-write of a pointer holds an
exclusive `flock` on the `config/` folder, so concurrent promotions never lose history. A
cluster without a pointer file of its own starts from the legacy project-wide
`config/promoted.yaml`, which is never rewritten or removed here.

The log is append-only and never rewritten. Each entry is one whole line: appended under a
`flock` on the log, continued after a short write until all of it is written, fsynced; a write
that fails is cut back so it leaves no torn line. A line torn by an earlier crash is ended
before the next entry (so it never swallows one) and skipped, named, by the reader. A failed
write or read (disk full, I/O error) is an `MachineError`: the machine's, not the release's.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from pydantic import ValidationError

from flows import fileio
from flows.errors import DiskFullError, MachineError, SpecError
from flows.promotion.models import (
    DEFAULT_CLUSTER,
    LEGACY_POINTER_FILE,
    LOG_FILE,
    LogEntry,
    Pointer,
    PromotionLog,
)
from flows.promotion.rules import pointer_file

HEADER = "# Written by `sparkgate promote/approve/rollback`; do not edit by hand.\n"
ENTRY_START = b'{"at":'  # every LogEntry line starts so (its first field)


def machine_failure(path: Path, doing: str, error: Exception, state: str) -> MachineError:
    """The error for a failed file operation: what, why, what is left, and that it is the
    machine (free space, repair the disk), not the release."""
    cause = error if isinstance(error, OSError) else error.__cause__
    why = (cause.strerror or str(cause)) if isinstance(cause, OSError) else str(error)
    return MachineError(
        f"{path}: cannot {doing}: {why}; {state} (a failure of this machine, not of the release)"
    )


# -- pointers ------------------------------------------------------------------------------------


def read_pointer(root: Path, cluster: str = DEFAULT_CLUSTER) -> Pointer | None:
    """The cluster's promoted pointer, or None before the first promotion.

    A cluster without a file of its own starts from the legacy project-wide pointer, if any.
    """
    path = pointer_source(root, cluster)
    if path is None:
        return None
    try:
        text = path.read_text()
    except OSError as error:
        raise machine_failure(path, "read the promoted pointer", error, "nothing moved") from error
    try:
        return Pointer.model_validate(yaml.safe_load(text))
    except (ValidationError, yaml.YAMLError) as error:
        raise SpecError(
            str(error).splitlines()[0], file=path, expected="a promoted pointer"
        ) from None


def pointer_source(root: Path, cluster: str) -> Path | None:
    """The file the cluster's pointer is read from: its own, else the legacy one, else None."""
    own = root / pointer_file(cluster)
    if own.is_file():
        return own
    legacy = root / LEGACY_POINTER_FILE
    return legacy if legacy.is_file() else None


def inherits_legacy(root: Path, cluster: str) -> bool:
    """Whether the cluster's pointer is still the legacy project-wide `config/promoted.yaml`."""
    return pointer_source(root, cluster) == root / LEGACY_POINTER_FILE


@contextmanager
def pointer_lock(root: Path) -> Iterator[None]:
    """Hold the `config/` folder exclusively (flock, released by the kernel if we die).

    One lock for every cluster's pointer and the legacy file beside them: pointer updates are
    rare and short, and a cluster's first write reads the legacy file.
    """
    folder = root / LEGACY_POINTER_FILE.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as error:
        raise machine_failure(folder, "lock the pointers", error, "nothing moved") from error
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # closing the last descriptor releases the lock


def switch_pointer(
    root: Path, cluster: str, change: Callable[[Pointer | None], Pointer]
) -> tuple[Pointer | None, Pointer]:
    """Apply `change` to the cluster's pointer under `pointer_lock`; (before, after)."""
    with pointer_lock(root):
        before = read_pointer(root, cluster)
        after = change(before)
        write_pointer(root, after, cluster)
        return before, after


def restore_pointer(root: Path, cluster: str, expected: Pointer, original: Pointer | None) -> bool:
    """Put `original` back (no pointer when None) if the cluster's pointer is still `expected`.

    False when another promotion changed the pointer meanwhile: it is left as that one wrote it.
    """
    with pointer_lock(root):
        if read_pointer(root, cluster) != expected:
            return False
        if original is None:
            path = root / pointer_file(cluster)
            try:
                path.unlink(missing_ok=True)
            except OSError as error:
                state = "it still names the new release"
                raise machine_failure(path, "remove the pointer", error, state) from error
        else:
            write_pointer(root, original, cluster)
        return True


def write_pointer(root: Path, pointer: Pointer, cluster: str = DEFAULT_CLUSTER) -> Path:
    """Replace the cluster's pointer atomically (temporary file, fsync, rename, folder fsync)."""
    path = root / pointer_file(cluster)
    data = (HEADER + yaml.safe_dump(pointer.model_dump(mode="json"), sort_keys=False)).encode()
    try:
        fileio.write_bytes(path, data, mode=fileio.SHARED_MODE)
    except (OSError, DiskFullError) as error:  # a full disk is the writer's DiskFullError
        state = "the pointer is as it was" if path.exists() else "no pointer was written"
        raise machine_failure(path, "write the promoted pointer", error, state) from error
    return path


# -- the log -------------------------------------------------------------------------------------


def append_log(root: Path, entry: LogEntry) -> Path:
    """Append one entry to the promotions log, as one whole line."""
    path = root / LOG_FILE
    append_line(path, entry.model_dump_json().encode())
    return path


def append_line(path: Path, line: bytes) -> None:
    """Append `line` and a newline to `path`: all of it, or nothing and an MachineError.

    Under an exclusive flock on the file, so no other appender's bytes land inside ours and a
    failed write can be cut back to where it started.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, fileio.SHARED_MODE)
    except OSError as error:
        raise machine_failure(path, "open the log", error, "nothing was appended") from error
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        start = os.fstat(handle).st_size
        torn = start > 0 and os.pread(handle, 1, start - 1) != b"\n"
        try:
            write_all(handle, (b"\n" if torn else b"") + line + b"\n")
            os.fsync(handle)
        except OSError as error:
            state = "the log is as it was" if cut_back(handle, start) else "its last line is torn"
            raise machine_failure(path, "append to the log", error, state) from error
    finally:
        os.close(handle)  # releases the lock


def write_all(handle: int, data: bytes) -> None:
    """Write every byte of `data`: a short write is continued where it stopped."""
    view = memoryview(data)
    while view:
        written = os.write(handle, view)
        if written <= 0:
            raise OSError(errno.EIO, "the write made no progress")
        view = view[written:]


def cut_back(handle: int, size: int) -> bool:
    """Truncate a file to `size` (drop a failed append's bytes); False when that fails too."""
    try:
        os.ftruncate(handle, size)
        os.fsync(handle)
    except OSError:
        return False  # the next append ends the torn line; the reader skips it
    return True


def read_log(root: Path) -> list[LogEntry]:
    """Every whole entry of the promotions log, oldest first (damaged lines skipped)."""
    return load_log(root).entries


def load_log(root: Path) -> PromotionLog:
    """The promotions log: its whole entries, and each damaged line it skipped, by number.

    A line torn by a crash is skipped and named; a whole entry after a torn fragment on the same
    line (what appends before this reader could leave) is still read.
    """
    path = root / LOG_FILE
    try:
        data = path.read_bytes() if path.is_file() else b""
    except OSError as error:
        raise machine_failure(path, "read the log", error, "nothing changed") from error
    lines = data.split(b"\n")
    entries: list[LogEntry] = []
    damaged: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        entry, skipped = _entry_of(line)
        if entry is not None:
            entries.append(entry)
        if skipped:
            last = number == len(lines)  # no newline after it: torn by the last write
            what = "a torn last line" if last and entry is None else "a torn fragment"
            damaged.append(f"{path}:{number}: {what} skipped ({skipped} bytes)")
    return PromotionLog(entries=entries, damaged=damaged)


def _entry_of(line: bytes) -> tuple[LogEntry | None, int]:
    """The whole entry a line ends with, and how many bytes before it were skipped."""
    start = 0
    while start >= 0:
        try:
            return LogEntry.model_validate_json(line[start:]), start
        except ValidationError:
            start = line.find(ENTRY_START, start + 1)
    return None, len(line)
