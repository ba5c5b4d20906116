"""JSON-lines events on stdout: the only channel through which the pipeline watches a rank.

Every line is one object with `ts` (UTC ISO-8601), `event` and `rank`, flushed at once so a
rank that dies right after still leaves its last words in the log.
"""

from __future__ import annotations

import json
import sys
import threading
from datetime import UTC, datetime
from typing import Any

_lock = threading.Lock()
_rank = 0


def set_rank(rank: int) -> None:
    """Remember this process's rank so every event carries it."""
    global _rank  # noqa: PLW0603 - one process is one rank
    _rank = rank


def emit(event: str, **fields: Any) -> None:
    """Write one event line to stdout and flush it."""
    record = {"ts": datetime.now(UTC).isoformat(), "event": event, "rank": _rank, **fields}
    line = json.dumps(record, separators=(",", ":"))
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
