"""The record.json schema: what a qualification leaves behind, typed so readers can rely on it.

record.json is the table of contents of a record folder: the resolved release and cluster, the
build digest, versions, every stage with its outcome, timing and files (each with the SHA-256
taken when it was saved), and the verdict. Stage results themselves live in
`<stage>/result.json`; record.json keeps a copy of each summary so one file answers most
questions, and `verify` checks the copy against the raw files.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from flows.fileio import sha256_file
from flows.gates.summaries import GateSummary, summary_as

# 2: stage summaries are typed (`gate` names their model; none is null). flows.record.legacy
# reads version 1.
SCHEMA_VERSION = 2
RECORD_FILE = "record.json"
README_FILE = "README.md"
RESULT_FILE = "result.json"
INVENTORY_FILE = "inventory.json"
PASSING_VERDICTS = frozenset({"passed", "qualified"})
_FROZEN = ConfigDict(frozen=True, extra="forbid")
S = TypeVar("S", bound=BaseModel)


class FileEntry(BaseModel):
    """One file of the record, relative to the record folder, as it was when saved."""

    model_config = _FROZEN

    path: str = Field(description="Path relative to the record folder.")
    sha256: str = Field(description="Hex SHA-256 at save time.")
    bytes: int = Field(ge=0, description="Size at save time.")


class StageEntry(BaseModel):
    """One finished stage: the gate's verdict, timing, files and a copy of its summary."""

    model_config = _FROZEN

    stage: str
    outcome: str = Field(description="passed, failed or skipped.")
    reason: str
    started_at: datetime
    seconds: float
    result: FileEntry = Field(description="The stage's result.json.")
    result_type: str = Field(description="module:qualname of the saved GateResult class.")
    files: list[FileEntry] = Field(default=[], description="Raw files the gate wrote.")
    evidence: list[str] = Field(default=[], description="Evidence folders (record-relative).")
    evidence_files: list[FileEntry] = Field(
        default=[], description="Every file of the evidence folders copied into the record."
    )
    summary: GateSummary | None = Field(default=None, description="Copy of the gate's summary.")

    def summary_as(self, model: type[S]) -> S | None:
        """The summary when it is a `model` (None for a stage that produced none)."""
        return summary_as(self.summary, model)


class Record(BaseModel):
    """A whole experiments record, as stored in record.json."""

    model_config = _FROZEN

    schema_version: int = SCHEMA_VERSION
    name: str = Field(description="Folder name, e.g. 2026-12-02-r2.")
    status: Literal["in-progress", "published"]
    release_name: str
    release: dict[str, Any] = Field(description="The resolved release spec.")
    cluster_name: str
    cluster: dict[str, Any] = Field(description="The resolved cluster spec.")
    previous: str | None = Field(description="The previous release (or its record) compared.")
    build_digest: str
    versions: dict[str, str] = Field(default={}, description="Tool and engine versions.")
    documents: dict[str, Any] = Field(default={}, description="Top-level JSON files, inline.")
    extras: list[FileEntry] = Field(default=[], description="Top-level files (build.json ...).")
    stages: dict[str, StageEntry] = Field(default={})
    stage_order: list[str] = Field(default=[], description="Stages in flow order (publish).")
    plots: list[FileEntry] = Field(default=[], description="PNG plots linked from README.")
    readme: FileEntry | None = Field(default=None, description="README.md as published.")
    render_version: int | None = Field(
        default=None, description="Layout version of the README renderer that wrote it."
    )
    verdict: str | None = Field(default=None, description="The flow's verdict (publish).")
    notes: str = ""
    created_at: datetime
    updated_at: datetime
    published_at: datetime | None = None
    _folder: Path | None = PrivateAttr(default=None)

    @property
    def folder(self) -> Path | None:
        """The folder this record was read from (None for a record built in memory)."""
        return self._folder

    def located(self, folder: Path) -> Record:
        """This record, knowing the folder it lives in (for readers of its raw files)."""
        self._folder = folder
        return self

    @property
    def host_inventory(self) -> Any:
        """The host inventory the flow saved as inventory.json (None if it saved none)."""
        return self.documents.get(INVENTORY_FILE)

    @property
    def wall_s(self) -> float | None:
        """Seconds from opening the record to publishing it."""
        if self.published_at is None:
            return None
        return (self.published_at - self.created_at).total_seconds()

    @property
    def date(self) -> str:
        """The record's date (YYYY-MM-DD), from its folder name."""
        return self.name[:10]

    @property
    def shape(self) -> str:
        """The cluster shape it ran on (tp3-triangle, tp4-ring ...): records compare only within."""
        return str(self.cluster.get("shape", ""))

    def summary_of(self, model: type[S]) -> S | None:
        """The summary of the stage whose summary is a `model` (None when none is)."""
        for entry in self.stages.values():
            if isinstance(entry.summary, model):
                return entry.summary
        return None

    def saved_json(self, relative: str) -> Any:
        """A stage file of the record as JSON, if it is listed and unchanged since it was saved
        (None otherwise: a reader never trusts an edited file)."""
        if self.folder is None:
            return None
        file = self.folder / relative
        listed = [f for stage in self.stages.values() for f in stage.files if f.path == relative]
        if not listed or not file.is_file() or sha256_file(file) != listed[0].sha256:
            return None
        try:
            return json.loads(file.read_text(encoding="utf-8"))
        except (ValueError, RecursionError, OSError):
            return None

    def ordered_stages(self) -> list[str]:
        """Stage names in flow order, then any saved stage the order does not name."""
        order = list(self.stage_order)
        return order + [stage for stage in self.stages if stage not in order]


def verdict_passes(verdict: str | None) -> bool:
    """Whether the flow's verdict text means the release passed every gate."""
    return (verdict or "").strip().lower() in PASSING_VERDICTS
