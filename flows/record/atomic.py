"""The record's file writes: the one atomic, durable writer of `flows.fileio`, at its default.

Records are written at `fileio.SHARED_MODE` (0644: committed and read by others), the writer's
default, so the record's modules import the writer from here or from `flows.fileio` alike; a
full disk raises a `DiskFullError` that says the previous version is intact.
"""

from __future__ import annotations

from flows.fileio import dump_json, fsync_dir, sha256_file, write_bytes, write_json, write_text

__all__ = ["dump_json", "fsync_dir", "sha256_file", "write_bytes", "write_json", "write_text"]
