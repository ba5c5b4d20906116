"""The A/A ledger as records hold it: past gaps of the same cluster shape and suite, traceable.

Boot-to-boot noise is only visible across boots, so the benchmark gate needs past gaps between
two arms of the same release. They come from records, never from a side file: every
qualification's benchmark stage keeps the gap of its own C1 and C2 (`benchmark/aa-gaps.json`),
and `sparkgate calibrate` keeps n-1 gaps of n arms in a calibration record
(experiments/calibration/<date>-<release>, apart from qualification records so a calibration is
never a release's "latest record"). `ledger_from_records` pools the gaps of published records of
the same cluster shape and suite, so the ledger grows with every run and every number in it can
be traced to a record; a gap file edited since it was saved is left out.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from flows.bench.ledger import Ledger, merge
from flows.fileio import sha256_file
from flows.gates.base import GateContext
from flows.record.model import Record
from flows.record.reader import list_records
from flows.spec.release import BenchmarkGate
from flows.spec.suite import Suite
from flows.spec.suites import load_suites

CALIBRATION_STAGE = "calibration"
CALIBRATION_DIR = "calibration"
GAPS_FILE = "aa-gaps.json"
# Stages whose folders hold A/A gaps: a qualification's benchmark and a calibration.
GAP_STAGES = ("benchmark", CALIBRATION_STAGE)


def ledger_from_records(
    experiments: Path, shape: str, suite: str, *, published_before: datetime | None = None
) -> Ledger:
    """The A/A ledger of every published record of this cluster shape and suite, oldest first.

    Qualification records (experiments/*) and calibration records (experiments/calibration/*)
    both count; a record's gaps are used only while its gap and arm files are as saved.
    `published_before` gives the ledger as it was at a moment (a stage's start), for verify.
    """
    records = [*list_records(experiments), *list_records(experiments / CALIBRATION_DIR)]
    records.sort(key=lambda record: (record.created_at, record.name))
    found: list[Ledger] = []
    for record in records:
        if record.status != "published" or record.cluster.get("shape") != shape:
            continue
        if published_before and (record.published_at or published_before) >= published_before:
            continue
        for stage in GAP_STAGES:
            ledger = _record_gaps(record, stage, suite)
            if ledger is not None:
                found.append(ledger)
    return merge(found)


def _record_gaps(record: Record, stage: str, suite: str) -> Ledger | None:
    """One stage's gaps, labelled with the record, if they were measured with this suite."""
    entry = record.stages.get(stage)
    if entry is None or record.folder is None:
        return None
    listed = {f.path: f.sha256 for f in entry.files}
    gaps_path = f"{stage}/{GAPS_FILE}"
    arms = sorted(path for path in listed if path.endswith("/arm.json"))
    if gaps_path not in listed or not arms:
        return None
    arm = _unchanged_json(record.folder, arms[0], listed[arms[0]])
    gaps = _unchanged_json(record.folder, gaps_path, listed[gaps_path])
    if not isinstance(arm, dict) or arm.get("suite") != suite or not isinstance(gaps, dict):
        return None
    try:
        ledger = Ledger.model_validate(gaps)
    except ValueError:
        return None
    labelled = [f"{record.name}: {session}" for session in ledger.sessions]
    return ledger.model_copy(update={"sessions": labelled})


def _unchanged_json(folder: Path, relative: str, sha256: str) -> Any:
    """A record file as JSON, or None when it is missing, edited since saved, or not JSON."""
    file = folder / relative
    if not file.is_file() or sha256_file(file) != sha256:
        return None
    try:
        return json.loads(file.read_text())
    except ValueError:
        return None


def suite_of(settings: BenchmarkGate) -> Suite:
    """The suite a benchmark setting names (names in config/suites or files; several combined)."""
    return load_suites(settings.suites())


def ledger_for(context: GateContext, settings: BenchmarkGate) -> Ledger:
    """The ledger a qualification's benchmark uses: records of its cluster shape and suite."""
    return ledger_from_records(context.experiments, context.cluster.shape, suite_of(settings).name)
