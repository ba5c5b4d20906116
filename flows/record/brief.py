"""A few lines on what the records say: each release's verdict, the calibration, the headline.

`make demo` ends with these lines, so a new user sees at a glance what just happened: which
releases qualified, how noisy the calibration found the machine, the newest qualification's
gated changes with their intervals, and where the records are (pure: records in, lines out).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from flows.gates.registry import REGISTRY
from flows.record.model import Record
from flows.record.outcome import findings


def brief_lines(
    records: Sequence[Record], calibrations: Sequence[Record], experiments: Path
) -> list[str]:
    """The summary lines: releases oldest first, then what each gate's story adds (the newest
    calibration's noise, the newest qualification's headline changes), then the folder."""
    lines: list[str] = []
    newest: dict[str, Record] = {}
    for record in records:
        newest[record.release_name] = record
    for name, record in newest.items():
        against = f" (against {record.previous})" if record.previous else ""
        bench = "".join(f"; {gate} {word}" for gate, word in findings(record).items())
        lines.append(f"{name}: {record.verdict or record.status}{bench}{against}  [{record.name}]")
    last = records[-1] if records else None
    calibration = calibrations[-1] if calibrations else None
    for gate in REGISTRY:
        lines += gate.story.brief(last, calibration)
    lines.append(f"records: {experiments} (sparkgate show <record>, sparkgate verify <record>)")
    return lines
