"""The gate loop as a Prefect flow, on fake gates: cache on rerun, resume, a crash as a verdict.

The registry's gates are swapped for fakes that count their runs, so the loop's own promises are
tested in seconds: a passed gate is taken from Prefect's cache when the same record runs again
(never for a new record made at a removed one's path), a rerun resumes at the first gate without
a result, and a gate that raises ends as a failed verdict in the record instead of an exception
out of the flow.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prefect import flow
from pydantic import BaseModel

from flows.gates.base import GateContext, GateResult, GateVerdict, History, Outcome
from flows.gates.files import GateFiles
from flows.pipeline import gate_loop
from flows.pipeline.events import NullObserver
from flows.pipeline.stages import GATES
from flows.record.writer import RecordWriter, open_record
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release, load_release

ROOT = Path(__file__).resolve().parents[3]


# this module's flows run on Prefect's test server, a throwaway database (`make unit` skips it)
pytestmark = [pytest.mark.prefect_server, pytest.mark.usefixtures("prefect_harness")]


@dataclass
class FakeGate:
    """A gate that passes (or fails, or raises) on command and counts its runs."""

    name: str
    outcome: Outcome = Outcome.PASSED
    crash: BaseException | None = None
    runs: int = 0
    title: str = "fake"
    settings_model: type[BaseModel] = BaseModel
    summary_model: type[BaseModel] = BaseModel
    boot_failure: str = "boot failed"
    seen: list[str] = field(default_factory=list)

    def inputs(
        self, context: GateContext, earlier: Mapping[str, GateResult], history: History
    ) -> list[str]:
        del context, history
        return sorted(earlier)

    def run(
        self, context: GateContext, settings: Any, inputs: list[str], files: GateFiles
    ) -> GateVerdict:
        del context, settings
        self.runs += 1
        self.seen = inputs
        if self.crash is not None:
            raise self.crash
        files.write_text("raw.txt", f"run {self.runs}\n")
        return GateVerdict(outcome=self.outcome, reason=f"{self.name} {self.outcome.value}")


class View(NullObserver):
    """The stage observer the loop reports to, keeping (stage, status) pairs."""

    def __init__(self) -> None:
        self.ended: list[tuple[str, str]] = []

    def finished(self, stage: str, status: str, detail: str = "") -> None:
        del detail
        self.ended.append((stage, status))


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> dict[str, FakeGate]:
    """Every registered gate replaced by a passing fake."""
    made = {name: FakeGate(name) for name in GATES}
    monkeypatch.setattr(gate_loop, "BY_NAME", made)
    return made


@pytest.fixture
def context(tmp_path: Path) -> GateContext:
    """r2 against r1 with every gate enabled, on the shipped local cluster."""
    release = load_release(ROOT / "releases/r2.yaml")
    gates = release.gates.model_copy(
        update={name: getattr(release.gates, name).model_copy(update={"enabled": True})
                for name in GATES}
    )  # fmt: skip
    return GateContext(
        cluster=load_model(ROOT / "config/local.yaml", Cluster),
        release=release.model_copy(update={"gates": gates}),
        previous=load_model(ROOT / "releases/r1.yaml", Release),
        transports={},
        state=tmp_path / "state",
        experiments=tmp_path / "experiments",
    )


def _loop(context: GateContext, folder: Path, view: View) -> dict[str, GateResult]:
    """run_gates inside a flow, on the record in `folder`, as qualify runs it."""

    @flow(name="gate-loop-test", validate_parameters=False)
    def loop() -> dict[str, GateResult]:
        record = RecordWriter(folder)
        return gate_loop.run_gates(context, record, "sha256:build", fresh=False, observer=view)

    return loop()


def _record(context: GateContext) -> Path:
    writer = open_record(
        context.experiments, context.release, build_digest="sha256:build",
        cluster=context.cluster, previous="r1",
    )  # fmt: skip
    return writer.path


def test_a_rerun_of_the_same_record_takes_every_passed_gate_from_the_cache(
    context: GateContext, fakes: dict[str, FakeGate]
) -> None:
    folder = _record(context)
    first = _loop(context, folder, View())
    assert [r.outcome for r in first.values()] == [Outcome.PASSED] * len(GATES)
    assert fakes["cold_boots"].seen == ["determinism", "release_tests"]  # earlier results
    assert first["release_tests"].files == ["raw.txt"]

    view = View()
    again = _loop(context, folder, view)
    assert {name: gate.runs for name, gate in fakes.items()} == dict.fromkeys(GATES, 1)
    assert view.ended == [(name, "cached") for name in GATES]
    assert {n: r.reason for n, r in again.items()} == {n: r.reason for n, r in first.items()}


def test_a_rerun_resumes_at_the_first_gate_without_a_result(
    context: GateContext, fakes: dict[str, FakeGate]
) -> None:
    folder = _record(context)
    fakes["cold_boots"].outcome = Outcome.FAILED
    view = View()
    first = _loop(context, folder, view)
    assert list(first) == ["release_tests", "determinism", "cold_boots"]
    assert first["cold_boots"].outcome == Outcome.FAILED
    assert view.ended[-1] == ("cold_boots", "failed")
    assert fakes["benchmark"].runs == 0  # the loop stops at the first failure

    fakes["cold_boots"].outcome = Outcome.PASSED
    view = View()
    second = _loop(context, folder, view)
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


def test_a_gate_that_crashes_is_a_failed_verdict_in_the_record(
    context: GateContext, fakes: dict[str, FakeGate]
) -> None:
    folder = _record(context)
    fakes["determinism"].crash = RuntimeError("the fake gate broke")
    view = View()
    results = _loop(context, folder, view)
    crashed = results["determinism"]
    assert crashed.outcome == Outcome.FAILED
    assert crashed.reason == "RuntimeError: the fake gate broke"
    assert view.ended[-1] == ("determinism", "failed")
    assert "cold_boots" not in results
    saved = RecordWriter(folder).load_stage("determinism")
    assert saved is not None
    assert saved.reason == crashed.reason


def test_a_record_made_again_at_the_same_path_runs_every_gate_again(
    context: GateContext, fakes: dict[str, FakeGate]
) -> None:
    folder = _record(context)
    _loop(context, folder, View())
    shutil.rmtree(folder)  # an unpublished record removed by hand, or a wiped experiments/
    assert _record(context) == folder  # the same day's first name again
    view = View()
    again = _loop(context, folder, view)
    assert view.ended == [(name, "passed") for name in GATES]
    assert {name: gate.runs for name, gate in fakes.items()} == dict.fromkeys(GATES, 2)
    assert [r.outcome for r in again.values()] == [Outcome.PASSED] * len(GATES)
    assert (folder / "determinism" / "raw.txt").read_text() == "run 2\n"
