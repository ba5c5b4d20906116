"""Read records written before summaries were typed (schema version 1) as the current layout.

Version 1 stored each stage's summary as a bare mapping (`{}` when the gate produced none) in
record.json and in `<stage>/result.json`. Version 2 names the summary's model by its `gate`
field and stores no summary as null. The files on disk are never rewritten (their SHA-256 is
part of the record); readers upgrade what they parse, and the upgrade leaves version 2 alone.
"""

from __future__ import annotations

from typing import Any

LEGACY_VERSION = 1


def upgrade_summary(stage: str, summary: Any) -> Any:
    """A version-1 summary mapping as version 2: tagged with its gate, or None when empty."""
    if not summary:
        return None
    if isinstance(summary, dict) and "gate" not in summary:
        return {"gate": stage, **summary}
    return summary


def upgrade_result(data: Any) -> Any:
    """A parsed result.json in the current layout (a version-2 one is returned as it is)."""
    if not isinstance(data, dict) or "summary" not in data:
        return data
    return {**data, "summary": upgrade_summary(str(data.get("gate")), data["summary"])}


def upgrade_record(data: Any) -> Any:
    """A parsed record.json in the current layout (its schema_version kept as written)."""
    if not isinstance(data, dict) or not isinstance(data.get("stages"), dict):
        return data
    stages = {
        name: {**entry, "summary": upgrade_summary(name, entry.get("summary"))}
        if isinstance(entry, dict)
        else entry
        for name, entry in data["stages"].items()
    }
    return {**data, "stages": stages}
