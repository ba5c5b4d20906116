"""A record's candidate arms and host facts, as the published side of `sparkgate bench compare`.

A user who wants to know whether their cluster matches a published release compares their own
arm with the arms that qualified it: the benchmark stage's candidate arms (`arms/<i>-candidate/`,
the ones that counted; disturbed arms never do), each with the host facts the record keeps
(`host-facts.json`, read in preflight) unless the arm carries its own.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import ValidationError

from flows.bench.hosts import FACTS_FILE, HostFacts
from flows.bench.report import ArmFileError, ArmReport, read_arm
from flows.record.model import Record
from flows.record.reader import read_record

BENCHMARK_STAGE = "benchmark"
# The arms that counted; a disturbed arm is kept beside them as `<i>-<role>-disturbed-<k>`.
CANDIDATE_ARM = re.compile(rf"{BENCHMARK_STAGE}/arms/(\d+)-candidate/arm\.json")


def candidate_arm_folders(record: Record) -> list[Path]:
    """The folders of the record's candidate arms in session order, each arm.json still as
    saved (an edited arm stands for nothing)."""
    stage = record.stages.get(BENCHMARK_STAGE)
    if record.folder is None or stage is None:
        return []
    found = sorted(
        (int(match.group(1)), file.path)
        for file in stage.files
        if (match := CANDIDATE_ARM.fullmatch(file.path)) and record.saved_json(file.path)
    )
    return [record.folder / Path(path).parent for _, path in found]


def record_facts(record: Record) -> HostFacts | None:
    """The host facts preflight read for this record (None: a record from before they were kept).

    Raises:
        ArmFileError: when host-facts.json is there but not host facts.
    """
    kept = record.documents.get(FACTS_FILE)
    if kept is None:
        return None
    try:
        return HostFacts.model_validate(kept)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ArmFileError(f"{record.name}/{FACTS_FILE}: {where}: {first['msg']}") from error


def candidate_arms(folder: Path) -> list[ArmReport]:
    """The record's candidate arms in session order, each carrying the record's host facts.

    Raises:
        ArmFileError: when the record has no benchmark stage or no candidate arm.
    """
    record = read_record(folder)
    folders = candidate_arm_folders(record)
    if not folders:
        raise ArmFileError(f"{folder}: no benchmark stage with a candidate arm in this record")
    facts = record_facts(record)
    arms = [read_arm(arm) for arm in folders]
    return [
        arm if arm.host_facts is not None else arm.model_copy(update={"host_facts": facts})
        for arm in arms
    ]
