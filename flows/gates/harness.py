"""The one way a gate runs: timing, atomic raw files, the file listing and boot-failure evidence.

Every gate's `run` only decides; `run_gate` times it, hands it a `GateFiles` that writes raw
files atomically under the stage folder, turns a boot that fails inside the gate into a failed
verdict carrying the boot's evidence folder, and lists the files the stage folder holds.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from flows.errors import BootError, boot_failure_reason
from flows.gates.base import Gate, GateContext, GateResult, GateVerdict, Outcome
from flows.gates.files import GateFiles

SettingsT = TypeVar("SettingsT", bound=BaseModel)
InputsT = TypeVar("InputsT")


def failed(reason: str, **fields: Any) -> GateVerdict:
    """A failed verdict (a gate's shorthand)."""
    return GateVerdict(outcome=Outcome.FAILED, reason=reason, **fields)


def run_gate(
    gate: Gate[SettingsT, InputsT],
    context: GateContext,
    settings: SettingsT,
    inputs: InputsT,
    out_dir: Path,
) -> GateResult:
    """Run one gate into `out_dir` and return its result (a failed boot is a failed verdict)."""
    started_at, clock = datetime.now(UTC), time.monotonic()
    files = GateFiles(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        verdict = gate.run(context, settings, inputs, files)
    except BootError as error:
        evidence = [str(error.evidence)] if error.evidence else []
        verdict = failed(boot_failure_reason(gate.boot_failure, str(error)), evidence=evidence)
    return GateResult(
        gate=gate.name,
        outcome=verdict.outcome,
        reason=verdict.reason,
        started_at=started_at,
        seconds=round(time.monotonic() - clock, 3),
        summary=verdict.summary,
        files=files.listing(),
        evidence=verdict.evidence,
    )
