"""Atomic file writes for records (kept for the record code; the writes live in `flows.fileio`)."""

from __future__ import annotations

from flows.fileio import dump_json, sha256_file, write_bytes, write_json, write_text

__all__ = ["dump_json", "sha256_file", "write_bytes", "write_json", "write_text"]
