"""Faults: the machine fails while a gate runs (issue 30, med: "Disk full during a gate is
published as the release failing").

A full disk or an I/O error is the machine's failure, not the release's: the harness raises a
`MachineError` naming the gate instead of a verdict, the gate loop records nothing for that gate
and stops the run, and the same command then runs the gate again. The full disk is a real 64 KiB
tmpfs (root only); an I/O error cannot be made on demand, so a fake gate raises its `OSError`.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from flows.errors import DiskFullError, MachineError
from flows.gates.base import GateContext, GateVerdict, Outcome
from flows.gates.files import GateFiles
from flows.gates.harness import run_gate
from flows.pipeline.stages import GATES
from flows.record.writer import RecordWriter
from tests.support.disk import fill
from tests.support.fake_gates import (  # noqa: F401 - fixtures used by name
    FakeGate,
    View,
    context,
    fakes,
    new_record,
    run_loop,
)

# the gate loop's flows report to the session's Prefect server
pytestmark = [pytest.mark.prefect_server, pytest.mark.usefixtures("prefect_in_process")]


class RawWriter(FakeGate):
    """A gate that writes its raw file with a plain `open`, as a gate's own code may."""

    def run(
        self, _context: GateContext, _settings: object, _inputs: list[str], files: GateFiles
    ) -> GateVerdict:
        with files.path("raw.bin").open("wb", buffering=0) as stream:
            stream.write(b"x" * 256 * 1024)
        raise AssertionError("the write should have failed")


def test_a_full_disk_under_a_gate_file_is_the_machine_not_a_verdict(
    small_disk: Path,
    context: GateContext,  # noqa: F811
) -> None:
    fill(small_disk)
    with pytest.raises(DiskFullError) as raised:
        run_gate(FakeGate("determinism"), context, None, [], small_disk / "determinism")
    said = str(raised.value)
    assert said.startswith("determinism: stopped on the machine, not a verdict on the release")
    assert "run the same command again" in said


def test_a_raw_enospc_from_a_gate_own_write_is_the_machine_not_a_verdict(
    small_disk: Path,
    context: GateContext,  # noqa: F811
) -> None:
    fill(small_disk)
    with pytest.raises(DiskFullError) as raised:
        run_gate(RawWriter("cold_boots"), context, None, [], small_disk / "cold_boots")
    assert isinstance(raised.value.__cause__, OSError)
    assert raised.value.__cause__.errno == errno.ENOSPC
    assert "No space left" in str(raised.value)
    assert str(raised.value).startswith("cold_boots: stopped on the machine")


def test_an_io_error_is_the_machine_and_other_os_errors_stay_the_gate_own(
    tmp_path: Path,
    context: GateContext,  # noqa: F811
) -> None:
    broken = FakeGate("benchmark", crash=OSError(errno.EIO, "Input/output error"))
    with pytest.raises(MachineError, match=r"^benchmark: stopped on the machine") as raised:
        run_gate(broken, context, None, [], tmp_path / "benchmark")
    assert not isinstance(raised.value, DiskFullError)  # an I/O error is not a full disk

    refused = FakeGate("benchmark", crash=ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    with pytest.raises(ConnectionRefusedError):  # the gate's own failure, judged as before
        run_gate(refused, context, None, [], tmp_path / "benchmark")


def test_a_gate_stopped_by_a_full_disk_records_no_verdict_and_a_rerun_resumes_there(
    context: GateContext,  # noqa: F811
    fakes: dict[str, FakeGate],  # noqa: F811
) -> None:
    folder = new_record(context)
    fakes["determinism"].crash = OSError(errno.ENOSPC, "No space left on device")
    view = View()
    with pytest.raises(DiskFullError, match=r"^determinism: stopped on the machine, not a verdict"):
        run_loop(context, folder, view)
    assert view.ended[-1] == ("determinism", "failed")
    assert RecordWriter(folder).load_stage("determinism") is None  # no "failed at determinism"
    assert fakes["cold_boots"].runs == 0

    fakes["determinism"].crash = None  # space freed: the same record resumes at determinism
    view = View()
    results = run_loop(context, folder, view)
    assert view.ended[:2] == [("release_tests", "cached"), ("determinism", "passed")]
    assert [r.outcome for r in results.values()] == [Outcome.PASSED] * len(GATES)
    assert fakes["determinism"].runs == 2


def test_a_machine_error_a_gate_meets_is_not_the_release_failing(
    context: GateContext,  # noqa: F811
    fakes: dict[str, FakeGate],  # noqa: F811
) -> None:
    folder = new_record(context)
    fakes["release_tests"].crash = DiskFullError(
        "record.json: no space left; the old one is intact"
    )
    with pytest.raises(DiskFullError, match=r"^release_tests: stopped on the machine"):
        run_loop(context, folder, View())
    assert RecordWriter(folder).load_stage("release_tests") is None
