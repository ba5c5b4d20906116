"""The one way a gate runs: timing, atomic raw files, the file listing and boot-failure evidence.

Every gate's `run` only decides; `run_gate` times it, hands it a `GateFiles` that writes raw
files atomically under the stage folder, turns a boot that fails inside the gate into a failed
verdict carrying the boot's evidence folder, and lists the files the stage folder holds.
"""

from __future__ import annotations

import errno
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from flows.errors import BootError, DiskFullError, MachineError, boot_failure_reason
from flows.gates.base import Gate, GateContext, GateResult, GateVerdict, Outcome
from flows.gates.files import GateFiles

SettingsT = TypeVar("SettingsT", bound=BaseModel)
InputsT = TypeVar("InputsT")

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
MACHINE_ERRNOS = NO_SPACE | {errno.EIO, errno.EROFS}
"""The `OSError` numbers that are the machine's failure (space, quota, disk), not a gate's."""


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
    except (MachineError, OSError) as error:
        stopped = machine_failure(gate.name, error)
        if stopped is None:
            raise
        raise stopped from error
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


def machine_failure(stage: str, error: BaseException) -> MachineError | None:
    """The machine's failure that `error` is, named for `stage`; None when it is not one.

    A `MachineError` or an `OSError` whose number is the machine's (`MACHINE_ERRNOS`) qualifies;
    any other error (a gate's own bug, a refused connection) stays what it is. One already
    named for `stage` is returned as it is.
    """
    said = f"{stage}: stopped on the machine"
    if isinstance(error, MachineError) and str(error).startswith(said):
        return error
    if not isinstance(error, MachineError) and not (
        isinstance(error, OSError) and error.errno in MACHINE_ERRNOS
    ):
        return None
    no_space = isinstance(error, DiskFullError) or getattr(error, "errno", None) in NO_SPACE
    kind = DiskFullError if no_space else MachineError
    return kind(
        f"{said}, not a verdict on the release ({error}); "
        "free space or repair the disk, then run the same command again to resume at this gate"
    )
