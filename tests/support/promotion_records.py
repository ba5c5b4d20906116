"""Records written as bare record.json files in a project, for the promotion unit tests.

`flows.promotion` imports Prefect, so the project's Prefect environment is fixed first;
no server is started by these tests (nothing here pauses or resumes a run).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flows.settings import prefect_environment

prefect_environment()

DIGEST = "a" * 64
GATE_NAMES = ("release_tests", "determinism", "cold_boots", "benchmark")


def stage(name: str, outcome: str = "passed", reason: str = "ok") -> dict[str, Any]:
    """A record.json stage entry."""
    return {
        "stage": name, "outcome": outcome, "reason": reason,
        "started_at": "2026-12-02T10:00:00Z", "seconds": 1.0,
        "result": {"path": f"{name}/result.json", "sha256": "0" * 64, "bytes": 1},
        "result_type": "flows.gates.base:GateResult",
    }  # fmt: skip


def record_document(
    release: str, *, stages: dict[str, dict[str, Any]], digest: str = DIGEST,
    verdict: str = "qualified", name: str | None = None, shape: str = "tp2-local",
) -> dict[str, Any]:  # fmt: skip
    """A published record.json of `release`, qualified on a cluster of `shape`."""
    now = datetime(2026, 12, 2, 11, tzinfo=UTC).isoformat()
    return {
        "name": name or f"2026-12-02-{release}", "status": "published", "release_name": release,
        "release": {}, "cluster_name": "local", "cluster": {"shape": shape}, "previous": None,
        "build_digest": digest, "stages": stages, "stage_order": list(GATE_NAMES),
        "verdict": verdict, "created_at": now, "updated_at": now, "published_at": now,
    }  # fmt: skip


@pytest.fixture
def write_record(project: Path) -> Callable[..., Path]:
    """Write a published record of a release into the project's experiments folder."""

    def write(release: str, **kwargs: Any) -> Path:
        document = record_document(release, **kwargs)
        folder = project / "experiments" / document["name"]
        folder.mkdir(parents=True)
        (folder / "record.json").write_text(json.dumps(document))
        return folder

    return write
