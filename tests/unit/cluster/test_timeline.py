"""The boot timeline is read from log lines exactly as the engine profile describes them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from flows.cluster.boot.timeline import LogReader, build_timeline
from flows.spec.engine import LogEvents, Logs

JSONL = Logs(
    format="jsonl",
    events=LogEvents(
        weights_loaded="loaded",
        kernels_prepared="prepared",
        rendezvous="rendezvous",
        ready="ready",
        compile_after_preparation="compile_after_freeze",
        collective_failure="collective_failure",
        peer_failure="peer_failure",
        fatal="fatal",
    ),
)
REGEX = Logs(
    format="regex",
    events=LogEvents(
        weights_loaded=r"Loading weights took (?P<seconds>[\d.]+)",
        ready=r"Application startup complete",
        compile_after_preparation=r"JIT compilation during inference",
        fatal=r"Traceback",
    ),
)
START = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)


def _line(event: str, seconds_after: float, **figures: object) -> str:
    ts = (START + timedelta(seconds=seconds_after)).isoformat()
    return json.dumps({"ts": ts, "event": event, "rank": 1, **figures})


def test_jsonl_events_map_to_phases_with_figures() -> None:
    reader = LogReader(JSONL, node="n1", rank=1)
    events = reader.read(
        [
            _line("start", 0.0),
            _line("loaded", 1.0, seconds=0.9),
            _line("prepared", 5.0, kernels=10, compiled=8, cached=2, seconds=3.5),
            "not json at all",
            _line("rendezvous", 6.5, seconds=1.25),
        ]
    )
    assert [e.name for e in events] == ["weights_loaded", "kernels_prepared", "rendezvous"]
    timeline = build_timeline(START, {("n1", 1): events}, START + timedelta(seconds=8))
    rank = timeline.ranks[0]
    assert rank.phases == {"weights_loaded": 1.0, "kernels_prepared": 5.0, "rendezvous": 6.5}
    assert (rank.kernels, rank.compiled, rank.cached) == (10, 8, 2)
    assert rank.prepare_s == 3.5
    assert rank.liveness_wait_s == 1.25
    assert timeline.ready_s == 8.0
    assert timeline.compiles_after_preparation == 0


def test_compiles_after_preparation_are_counted_and_failures_kept() -> None:
    reader = LogReader(JSONL, node="n0", rank=0)
    events = reader.read(
        [
            _line("compile_after_freeze", 9.0, family="mlp", key="x"),
            _line("compile_after_freeze", 9.5, family="mlp", key="y"),
            _line("peer_failure", 10.0, peer=1, reason="died in phase prepare"),
        ]
    )
    timeline = build_timeline(START, {("n0", 0): events}, None)
    assert timeline.compiles_after_preparation == 2
    assert timeline.ready_s is None
    assert events[-1].is_failure
    assert "died in phase prepare" in timeline.ranks[0].failures[0]


def test_regex_profile_reads_docker_timestamps_and_named_groups() -> None:
    reader = LogReader(REGEX, node="spark-a", rank=0)
    stamp = "2026-12-02T10:00:12.123456789Z"
    events = reader.read(
        [
            f"{stamp} INFO Loading weights took 15.20 seconds",
            "2026-12-02T10:02:00.5Z INFO: Application startup complete.",
            "2026-12-02T10:03:00Z WARNING JIT compilation during inference: kernel foo",
            "unrelated line",
        ]
    )
    assert [e.name for e in events] == ["weights_loaded", "ready", "compile_after_preparation"]
    assert events[0].figures == {"seconds": 15.2}
    assert events[0].ts == datetime(2026, 12, 2, 10, 0, 12, 123456, tzinfo=UTC)
    timeline = build_timeline(START, {("spark-a", 0): events}, None)
    assert timeline.ranks[0].phases["ready"] == 120.5
    assert timeline.compiles_after_preparation == 1


def test_ranks_are_ordered_and_slowest_preparation_is_reported() -> None:
    fast = LogReader(JSONL, node="a", rank=0).read([_line("prepared", 2, seconds=1.0)])
    slow = LogReader(JSONL, node="b", rank=1).read([_line("prepared", 9, seconds=7.0)])
    timeline = build_timeline(START, {("b", 1): slow, ("a", 0): fast}, None)
    assert [r.rank for r in timeline.ranks] == [0, 1]
    assert timeline.slowest_prepare_s == 7.0


def test_a_line_raises_every_event_it_matches_so_a_compile_is_never_hidden() -> None:
    """Issue 30: markers were first-match-wins, so a line that matched `weights_loaded` and also
    reported a compile raised only the phase; the compile vanished and replay said "passes".
    Buffered logs join lines like this (the r6n report in the recipe's thread saw rank 0's
    TileLang messages reach the Docker log together)."""
    from flows.cluster.boot.replay import RankLog, replay  # noqa: PLC0415
    from flows.spec.engine import EngineProfile  # noqa: PLC0415
    from flows.spec.load import load_model  # noqa: PLC0415

    joined = (
        "2026-12-02T10:00:01Z Loading weights took 3.0 s; "
        "TileLang JIT compilation during inference: sparse_mla"
    )
    events = LogReader(REGEX, node="n1", rank=0).read([joined])
    assert [e.name for e in events] == ["weights_loaded", "compile_after_preparation"]
    assert events[0].figures == {"seconds": 3.0}

    bundled = load_model(Path("config/engines/sparkengine.yaml").resolve(), EngineProfile)
    profile = bundled.model_copy(update={"logs": REGEX})
    result = replay(profile, [RankLog(node="n1", rank=0, lines=[joined])])
    assert result.verdict == "fails: 1 compiles after preparation"
    assert result.timeline.ranks[0].phases == {"weights_loaded": 0.0}
