"""Experiments records: write, read, index, render (markdown, plots) and verify.

A record is a folder experiments/<date>-<release> holding every stage's raw results, a
record.json that lists them with their SHA-256, and a README rendered from them. The qualify
flow writes it through `open_record`; reviewers read it with `sparkgate records`, `show` and
`verify`, which recomputes every table from the raw files.
"""

from __future__ import annotations

from flows.record.index import render_index, write_index
from flows.record.model import SCHEMA_VERSION, FileEntry, Record, StageEntry
from flows.record.reader import find_record, latest_record, list_records, read_record
from flows.record.readme import render_readme
from flows.record.verify import verify
from flows.record.writer import RecordWriter, open_record

__all__ = [
    "SCHEMA_VERSION",
    "FileEntry",
    "Record",
    "RecordWriter",
    "StageEntry",
    "find_record",
    "latest_record",
    "list_records",
    "open_record",
    "read_record",
    "render_index",
    "render_readme",
    "verify",
    "write_index",
]
