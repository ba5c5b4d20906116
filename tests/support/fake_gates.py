"""Fake gates and the gate loop run as qualify runs it, for tests of the loop's own promises.

The registry's gates are swapped for fakes that pass, fail or raise on command and count their
runs; `run_loop` runs `run_gates` inside a Prefect flow on a record folder (the caller provides
the Prefect server, e.g. the `prefect_in_process` fixture).
"""

from __future__ import annotations

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

ROOT = Path(__file__).resolve().parents[2]


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


def run_loop(context: GateContext, folder: Path, view: View) -> dict[str, GateResult]:
    """run_gates inside a flow, on the record in `folder`, as qualify runs it."""

    @flow(name="gate-loop-test", validate_parameters=False)
    def loop() -> dict[str, GateResult]:
        record = RecordWriter(folder)
        return gate_loop.run_gates(context, record, "sha256:build", fresh=False, observer=view)

    return loop()


def new_record(context: GateContext) -> Path:
    writer = open_record(
        context.experiments, context.release, build_digest="sha256:build",
        cluster=context.cluster, previous="r1",
    )  # fmt: skip
    """A new record of the context's release, as qualify opens one."""
    return writer.path
