"""Boot a release on a cluster and watch every rank until the head serves, or say who failed.

Ranks start in parallel (workers first, then the head). While waiting for the readiness URL the
loop watches every rank: one that exits, or logs a collective or peer failure, ends the wait at
once with a `BootError` naming node, rank and cause. Before anything is torn down the evidence of
every node is captured; then every rank is stopped, so a failed boot never leaves the cluster
half-running. A successful boot returns the handles and the boot timeline read from the logs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from flows.cluster.boot.evidence import capture, evidence_folder
from flows.cluster.boot.timeline import BootTimeline, LogEvent, LogReader, build_timeline
from flows.cluster.runtime.base import RankHandle, Runtime
from flows.cluster.transport.base import Transport
from flows.engine_api.ready import probe_ready
from flows.errors import BootError, SparkgateError
from flows.spec.engine import EngineProfile
from flows.spec.launch import LaunchPlan

LOG_TAIL_CHARS = 1500

EventSink = Callable[[LogEvent], None]
_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass
class BootResult:
    """A cluster that serves: its ranks and how the boot went."""

    handles: list[RankHandle]
    timeline: BootTimeline
    wall_s: float


@dataclass
class _Watch:
    """Per-rank log position and events seen so far."""

    handle: RankHandle
    reader: LogReader
    offset: int = 0
    events: list[LogEvent] = field(default_factory=list)


def boot(
    profile: EngineProfile,
    plans: Sequence[LaunchPlan],
    runtime: Runtime,
    transports: Mapping[str, Transport],
    *,
    evidence_root: Path,
    on_event: EventSink | None = None,
    probe: Callable[[str], bool] | None = None,
) -> BootResult:
    """Start every rank, wait for readiness while watching them; BootError with evidence."""
    probe = probe or probe_ready
    started = datetime.now(UTC)
    clock = time.monotonic()
    handles: list[RankHandle] = []
    try:
        _parallel(runtime.prepare, plans)
        handles.extend(_start_all(runtime, plans))
        watches = [_Watch(h, LogReader(profile.logs, node=h.node, rank=h.rank)) for h in handles]
        ready_at = _wait_ready(profile, runtime, watches, probe, on_event)
        runtime.settle(handles)
        _read_new(runtime, watches, on_event)
    except SparkgateError as error:
        raise _fail(error, runtime, handles, transports, evidence_root) from error
    except BaseException as error:
        _fail(
            BootError(f"boot interrupted: {error!r}"), runtime, handles, transports, evidence_root
        )
        raise
    events = {(w.handle.node, w.handle.rank): w.events for w in watches}
    timeline = build_timeline(started, events, ready_at)
    return BootResult(handles=handles, timeline=timeline, wall_s=time.monotonic() - clock)


def stop_all(runtime: Runtime, handles: Sequence[RankHandle]) -> None:
    """Stop every rank in parallel: head first so it does not report its workers as lost."""
    heads = [h for h in handles if h.head]
    workers = [h for h in handles if not h.head]
    _parallel(runtime.stop, heads)
    _parallel(runtime.stop, workers)


def _start_all(runtime: Runtime, plans: Sequence[LaunchPlan]) -> list[RankHandle]:
    workers = [p for p in plans if not p.head]
    heads = [p for p in plans if p.head]
    return [*_parallel(runtime.start, workers), *_parallel(runtime.start, heads)]


def _wait_ready(
    profile: EngineProfile,
    runtime: Runtime,
    watches: list[_Watch],
    probe: Callable[[str], bool],
    on_event: EventSink | None,
) -> datetime:
    head = next(w.handle for w in watches if w.handle.head)
    url = head.plan.ready_url
    if url is None:
        raise BootError(f"node {head.node} rank {head.rank}: the head has no readiness URL")
    deadline = time.monotonic() + profile.ready.timeout_s
    while True:
        _read_new(runtime, watches, on_event)
        _check_ranks(runtime, watches, on_event)
        if probe(url):
            return datetime.now(UTC)
        if time.monotonic() > deadline:
            raise BootError(
                f"node {head.node} rank {head.rank}: not ready at {url} after "
                f"{profile.ready.timeout_s:g} s"
            )
        time.sleep(profile.ready.interval_s)


def _read_new(runtime: Runtime, watches: list[_Watch], on_event: EventSink | None) -> None:
    for watch in watches:
        chunk = runtime.read_log(watch.handle, watch.offset)
        if not chunk:
            continue
        lines = chunk.split("\n")
        lines.pop()  # the unfinished last line: read again next time, from its first byte
        if not lines:
            continue
        # Runtimes hand back text decoded with errors="replace", so a read that ends inside a
        # multi-byte character turns its first bytes into U+FFFD, whose encoding is longer: the
        # byte offset must only move past whole lines, which no read boundary splits.
        watch.offset += sum(len(line.encode()) + 1 for line in lines)
        for event in watch.reader.read(lines):
            watch.events.append(event)
            if on_event is not None:
                on_event(event)


def _check_ranks(runtime: Runtime, watches: list[_Watch], on_event: EventSink | None) -> None:
    """Fail at once when a rank is gone or logs a failure; name the culprit first.

    Ranks that lose a peer exit too, often within the same poll as the peer that died. So once a
    rank is gone, the last words of every rank are read before choosing whom to name: a rank that
    died without blaming a peer (a crash, a kill) is named before one that reports losing a peer,
    and a dead worker before the head that reports losing it. The others' reports (which name the
    missing peer, the collective and the phase) are appended as the cause.
    """
    gone = [(w, runtime.status(w.handle)) for w in watches]
    gone = [(w, status) for w, status in gone if not status.running]
    if gone:
        _read_new(runtime, watches, on_event)
    reports = [(w, e) for w in watches for e in w.events if e.is_failure]
    if not gone and not reports:
        return
    if gone:
        watch, status = min(gone, key=lambda item: _blame_order(item[0]))
        own = next((e for w, e in reports if w is watch), None)
        detail = _describe(own) if own else _last_output(runtime, watch)
        detail = f"{status.describe()} during boot: {detail}"
    else:
        watch, event = min(reports, key=lambda item: _blame_order(item[0]))
        detail = _describe(event)
    others = [f"rank {w.handle.rank} reports {_describe(e)}" for w, e in reports if w is not watch]
    cause = "; ".join([detail, *others[:2]])
    raise BootError(f"node {watch.handle.node} rank {watch.handle.rank}: {cause}")


def _blame_order(watch: _Watch) -> tuple[bool, bool, int]:
    """Sort key: ranks that blame no peer first, then workers before the head, then by rank."""
    blames_peer = any(event.blames_peer for event in watch.events)
    return (blames_peer, watch.handle.head, watch.handle.rank)


def _describe(event: LogEvent) -> str:
    parts = [f"{k}={v}" for k, v in event.figures.items() if k != "rank"]
    return f"{event.name} " + (", ".join(parts) or event.line)


def _last_output(runtime: Runtime, watch: _Watch) -> str:
    lines = runtime.read_log(watch.handle).strip().splitlines()
    tail = "\n".join(lines[-5:])[-LOG_TAIL_CHARS:]
    return f"last output: {tail or '(none)'}"


def _fail(
    error: SparkgateError,
    runtime: Runtime,
    handles: Sequence[RankHandle],
    transports: Mapping[str, Transport],
    evidence_root: Path,
) -> BootError:
    """Capture evidence, stop everything, and return the error that names the evidence."""
    cause = str(error)
    folder = None
    if handles:
        folder = capture(
            evidence_folder(evidence_root, "boot"), runtime, handles, transports, cause=cause
        )
    stop_all(runtime, handles)
    where = f" (evidence: {folder})" if folder else ""
    return BootError(f"boot failed: {cause}{where}", evidence=folder)


def _parallel(work: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(work, items))
