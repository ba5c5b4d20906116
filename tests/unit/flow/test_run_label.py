"""A flow run says what it is: name, tags, the terminal's lines in its log, review artifacts."""

from __future__ import annotations

import time
from pathlib import Path
from uuid import UUID

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactCollectionFilter,
    ArtifactCollectionFilterKey,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.context import FlowRunContext

from flows.gates.benchmark.summary import BenchmarkSummary
from flows.pipeline.artifacts import ProgressArtifacts, publish_benchmark
from flows.pipeline.events import NullObserver, current_observer, observer_of_run
from flows.pipeline.run_label import label_current_run, run_tags, run_title
from flows.record.reader import read_record
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import load_release

ROOT = Path(__file__).resolve().parents[3]


# this module's flows report to the session's Prefect server (`make unit` skips it)
pytestmark = [pytest.mark.prefect_server, pytest.mark.usefixtures("prefect_in_process")]


class Recorder(NullObserver):
    """The terminal's side: keeps every note."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, line: str) -> None:
        self.lines.append(line)


@flow
def labelled() -> UUID:
    release = load_release(ROOT / "releases/r2.yaml")
    previous = load_release(ROOT / "releases/r1.yaml")
    cluster = load_model(ROOT / "config/local.yaml", Cluster)
    label_current_run(run_title("qualify", release, cluster), run_tags(release, previous, cluster))
    observer_of_run().note("benchmark: arm 1 (candidate, r2): booting")
    context = FlowRunContext.get()
    assert context is not None
    assert context.flow_run is not None
    return context.flow_run.id


def test_a_run_is_named_and_tagged_and_logs_what_the_terminal_shows() -> None:
    terminal = Recorder()
    token = current_observer.set(terminal)
    try:
        run_id = labelled()
    finally:
        current_observer.reset(token)
    assert terminal.lines == ["benchmark: arm 1 (candidate, r2): booting"]
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id)
        assert run.name == "qualify r2 on local (tp2-local)"
        assert {"release:r2", "previous:r1", "cluster:local", "shape:tp2-local"} <= set(run.tags)
        deadline = time.monotonic() + 30
        messages: list[str] = []
        while time.monotonic() < deadline:
            logs = client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id]))
            )
            messages = [log.message for log in logs]
            if "benchmark: arm 1 (candidate, r2): booting" in messages:
                break
            time.sleep(0.5)
    assert "benchmark: arm 1 (candidate, r2): booting" in messages


def test_outside_a_run_labelling_does_nothing() -> None:
    release = load_release(ROOT / "releases/r1.yaml")
    cluster = load_model(ROOT / "config/local.yaml", Cluster)
    label_current_run(run_title("calibrate", release, cluster), run_tags(release, None, cluster))
    assert run_tags(release, None, cluster)[1] == "previous:none"


@flow
def reviewed() -> None:
    record = read_record(ROOT / "tests/data/records/schema-1/2026-12-03-r2")
    stage = record.stages["benchmark"]
    summary = stage.summary_as(BenchmarkSummary)
    assert summary is not None
    publish_benchmark("r2", summary)
    progress = ProgressArtifacts(every_s=0.0)
    for done in range(4):
        progress.update("arm 1 samples", done, 3)


def test_the_benchmark_points_and_progress_are_artifacts() -> None:
    reviewed()
    with get_client(sync_client=True) as client:
        table = client.read_latest_artifacts(
            artifact_filter=ArtifactCollectionFilter(
                key=ArtifactCollectionFilterKey(any_=["benchmark-r2"])
            )
        )
        progress = client.read_latest_artifacts(
            artifact_filter=ArtifactCollectionFilter(
                key=ArtifactCollectionFilterKey(any_=["progress-arm-1-samples"])
            )
        )
    assert len(table) == 1
    assert table[0].type == "table"
    assert "prefill/1024" in str(table[0].data)
    assert "[" in str(table[0].data)
    assert len(progress) == 1
    assert progress[0].data == 100.0
