"""The gate loop as a Prefect flow, on fake gates: cache on rerun, resume, a crash as a verdict.

The registry's gates are swapped for fakes that count their runs, so the loop's own promises are
tested in seconds: a passed gate is taken from Prefect's cache when the same record runs again
(never for a new record made at a removed one's path), a rerun resumes at the first gate without
a result, and a gate that raises ends as a failed verdict in the record instead of an exception
out of the flow.
"""

from __future__ import annotations

import shutil

import pytest

from flows.gates.base import GateContext, Outcome
from flows.pipeline.stages import GATES
from flows.record.writer import RecordWriter
from tests.support.fake_gates import (  # noqa: F401 - fixtures used by name
    FakeGate,
    View,
    context,
    fakes,
    new_record,
    run_loop,
)

# this module's flows report to the session's Prefect server (`make unit` skips it)
pytestmark = [pytest.mark.prefect_server, pytest.mark.usefixtures("prefect_in_process")]


def test_a_rerun_of_the_same_record_takes_every_passed_gate_from_the_cache(
    context: GateContext,  # noqa: F811
    fakes: dict[str, FakeGate],  # noqa: F811
) -> None:
    folder = new_record(context)
    first = run_loop(context, folder, View())
    assert [r.outcome for r in first.values()] == [Outcome.PASSED] * len(GATES)
    assert fakes["cold_boots"].seen == ["determinism", "release_tests"]  # earlier results
    assert first["release_tests"].files == ["raw.txt"]

    view = View()
    again = run_loop(context, folder, view)
    assert {name: gate.runs for name, gate in fakes.items()} == dict.fromkeys(GATES, 1)
    assert view.ended == [(name, "cached") for name in GATES]
    assert {n: r.reason for n, r in again.items()} == {n: r.reason for n, r in first.items()}


def test_a_rerun_resumes_at_the_first_gate_without_a_result(
    context: GateContext,  # noqa: F811
    fakes: dict[str, FakeGate],  # noqa: F811
) -> None:
    folder = new_record(context)
    fakes["cold_boots"].outcome = Outcome.FAILED
    view = View()
    first = run_loop(context, folder, view)
    assert list(first) == ["release_tests", "determinism", "cold_boots"]
    assert first["cold_boots"].outcome == Outcome.FAILED
    assert view.ended[-1] == ("cold_boots", "failed")
    assert fakes["benchmark"].runs == 0  # the loop stops at the first failure

    fakes["cold_boots"].outcome = Outcome.PASSED
    view = View()
    second = run_loop(context, folder, view)
    assert [r.outcome for r in second.values()] == [Outcome.PASSED] * len(GATES)
    assert view.ended == [
        ("release_tests", "cached"), ("determinism", "cached"),
        ("cold_boots", "passed"), ("benchmark", "passed"),
    ]  # fmt: skip
    runs = {name: gate.runs for name, gate in fakes.items()}
    assert runs == {"release_tests": 1, "determinism": 1, "cold_boots": 2, "benchmark": 1}
    saved = RecordWriter(folder).load_stage("cold_boots")
    assert saved is not None
    assert saved.outcome == Outcome.PASSED


def test_a_gate_that_crashes_is_a_failed_verdict_in_thenew_record(
    context: GateContext,  # noqa: F811
    fakes: dict[str, FakeGate],  # noqa: F811
) -> None:
    folder = new_record(context)
    fakes["determinism"].crash = RuntimeError("the fake gate broke")
    view = View()
    results = run_loop(context, folder, view)
    crashed = results["determinism"]
    assert crashed.outcome == Outcome.FAILED
    assert crashed.reason == "RuntimeError: the fake gate broke"
    assert view.ended[-1] == ("determinism", "failed")
    assert "cold_boots" not in results
    saved = RecordWriter(folder).load_stage("determinism")
    assert saved is not None
    assert saved.reason == crashed.reason


def test_a_record_made_again_at_the_same_path_runs_every_gate_again(
    context: GateContext,  # noqa: F811
    fakes: dict[str, FakeGate],  # noqa: F811
) -> None:
    folder = new_record(context)
    run_loop(context, folder, View())
    shutil.rmtree(folder)  # an unpublished record removed by hand, or a wiped experiments/
    assert new_record(context) == folder  # the same day's first name again
    view = View()
    again = run_loop(context, folder, view)
    assert view.ended == [(name, "passed") for name in GATES]
    assert {name: gate.runs for name, gate in fakes.items()} == dict.fromkeys(GATES, 2)
    assert [r.outcome for r in again.values()] == [Outcome.PASSED] * len(GATES)
    assert (folder / "determinism" / "raw.txt").read_text() == "run 2\n"
