"""What promotion keeps: a promoted entry, a cluster's pointer, one line of the promotions log.

A cluster's pointer is one file, `config/promoted/<cluster>.yaml` (named by the cluster's
`name`): the current entry plus the earlier promoted ones, newest first. Before pointers were
per cluster, one project-wide `config/promoted.yaml` was the promoted release of every cluster;
it is still read as the starting pointer of a cluster without a file of its own. Every decision
(promoted, rejected, no decision in time, deployed, deploy failed, rolled back) is one JSON line
of `experiments/promotions.jsonl`, naming the cluster. No I/O and no Prefect here.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

POINTER_DIR = Path("config/promoted")
LEGACY_POINTER_FILE = Path("config/promoted.yaml")
DEFAULT_CLUSTER = "local"  # the cluster every command uses without -c (config/local.yaml)
LOG_FILE = Path("experiments/promotions.jsonl")
_FROZEN = ConfigDict(frozen=True, extra="forbid")

Action = Literal["promoted", "rejected", "no-decision", "deployed", "deploy-failed", "rolled-back"]


class PromotedEntry(BaseModel):
    """One promoted release: what, which build, which record proves it, who, when, why."""

    model_config = _FROZEN

    release: str
    release_file: str = Field(description="Relative to the project root when inside it.")
    build_digest: str
    record: str = Field(description="Record folder, relative to the project root when inside.")
    at: datetime
    by: str
    reason: str
    accepted_inconclusive: str | None = Field(
        default=None,
        description="Why `by` accepted a record whose benchmark was inconclusive (None: the "
        "record was not inconclusive).",
    )


class Pointer(BaseModel):
    """config/promoted/<cluster>.yaml: a cluster's promoted release and the earlier ones."""

    model_config = _FROZEN

    current: PromotedEntry
    history: list[PromotedEntry] = Field(default=[], description="Earlier promotions.")


class LogEntry(BaseModel):
    """One line of the promotions log."""

    model_config = _FROZEN

    at: datetime
    action: Action
    release: str
    by: str
    reason: str
    cluster: str | None = Field(
        default=None, description="The cluster whose pointer moved (absent in older lines)."
    )
    build_digest: str | None = None
    record: str | None = None
    evidence: list[str] = Field(default=[], description="Evidence folders of failed boots.")
    detail: str = ""
    accepted_inconclusive: str | None = Field(
        default=None,
        description="A promotion of an inconclusive record: why `by` accepted it.",
    )


class PromotionLog(BaseModel):
    """The promotions log as read: its whole entries, and the damaged lines it skipped.

    A line torn by a crash or a failed write is never a whole entry; it is named in `damaged`
    (file:line and why) instead of making the whole log unreadable.
    """

    model_config = _FROZEN

    entries: list[LogEntry]
    damaged: list[str] = Field(default=[], description="`FILE:LINE: what was skipped`.")
