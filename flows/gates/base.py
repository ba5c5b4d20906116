"""What every gate gets and returns, so the qualify flow can run, persist and resume them alike.

A gate is a plain function `run_<gate>(context, settings, out_dir) -> GateResult` (or a subclass
with the gate's own typed details). It writes its raw files under `out_dir` (the stage's folder
in the experiments record) as it goes, and returns a result whose `outcome` decides the flow.
Gates never import Prefect: the flow wraps them in tasks, caches their results and writes them
into the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flows.cluster.transport.base import Transport
from flows.lines import LineSink, silent
from flows.spec.cluster import Cluster
from flows.spec.release import Release


class Outcome(StrEnum):
    """How a gate ended."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class GateResult(BaseModel):
    """A gate's verdict, headline figures and the files it wrote (relative to its folder)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gate: str = Field(description="release_tests, determinism, cold_boots or benchmark.")
    outcome: Outcome
    reason: str = Field(description="One line a person reads first: why it passed or failed.")
    started_at: datetime
    seconds: float
    summary: dict[str, Any] = Field(default={}, description="Headline figures for tables.")
    files: list[str] = Field(default=[], description="Raw files written, relative to out_dir.")
    evidence: list[str] = Field(default=[], description="Evidence folders of failed attempts.")

    @property
    def passed(self) -> bool:
        """True unless the gate failed (a skipped gate does not block)."""
        return self.outcome != Outcome.FAILED


@dataclass(frozen=True)
class GateContext:
    """Everything a gate may touch: the resolved specs, the nodes, and where state lives."""

    cluster: Cluster
    release: Release
    previous: Release | None
    transports: dict[str, Transport]
    state: Path = field(metadata={"doc": "project-local state folder (.sparkgate)"})
    experiments: Path = field(metadata={"doc": "folder of experiments records"})
    say: LineSink = field(default=silent)
    advance: Callable[[str, int, int], None] = field(
        default=lambda _what, _done, _total: None,
        metadata={"doc": "progress inside the gate: what is counted, done, total"},
    )


def api_base_url(cluster: Cluster) -> str:
    """Base URL of the head's OpenAI-compatible API, e.g. http://127.0.0.1:8017."""
    return f"http://{cluster.head.address}:{cluster.ports.api}"
