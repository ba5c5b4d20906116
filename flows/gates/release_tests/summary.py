"""The release-tests gate's summary: test counts, per-file outcomes and the classification."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Excluded(BaseModel):
    """A candidate file left out of the gate, and why."""

    model_config = _FROZEN

    file: str
    reason: str


class FileRow(BaseModel):
    """One gate file as the record renders it."""

    model_config = _FROZEN

    file: str
    outcome: str = Field(description="passed, failed, error, skipped or not-run.")
    tests: int
    seconds: float


class ReleaseTestsSummary(BaseModel):
    """What the record renders of a release-tests run (and `verify` recounts from JUnit XML)."""

    model_config = _FROZEN

    gate: Literal["release_tests"] = "release_tests"
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    seconds: float | None = None
    files: list[FileRow] = []
    excluded: list[Excluded] = []
    node: str = "?"
    unclassified: list[str] = []
    changed: list[str] = []
    run_key: str | None = Field(
        default=None,
        description="SHA-256 of what decided the run (build, gate files, options, node, runtime).",
    )
    reused_from: str | None = Field(
        default=None,
        description="The earlier record whose identical run this stage took, instead of running.",
    )

    def count(self, key: str) -> int:
        """One of the counts by name (passed, failed, errors, skipped)."""
        value: int = getattr(self, key)
        return value
