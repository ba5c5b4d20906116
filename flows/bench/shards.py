"""A batch spread over client processes that live for an arm and start together once all are ready.

A fresh process pool per batch and a start time guessed 2 s ahead cost every batch 2 s of idling
plus a pool start, and still let a shard that took longer than the guess to ship start late. Here
the processes are started once (on the first batch that needs them, more when a later batch needs
more) and kept until `close`. For each batch every process receives its shard and says it is
ready; only then does the parent set the common start time `START_MARGIN_S` ahead and release them.

Every process uses the same monotonic start time (CLOCK_MONOTONIC is system-wide), so `sent_s` and
due times mean the same in every shard. Receipts come back in item order. Processes are forked,
as the client's processes always were: nothing is imported again, and a shard is all they receive.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, Self

from flows.bench.client import Scheduled, ShardResult, client_stats, run_shard
from flows.errors import BenchError

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from flows.bench.report import ClientStats, Receipt

START_MARGIN_S = 0.05
"""How far ahead of the release the common start is set. The release is one small pipe write per
process (microseconds each), so 50 ms leaves a busy host room to wake every process before t0
while idling a batch 40 times less than the old 2 s guess."""

READY_TIMEOUT_S = 120.0
"""Longest wait for every process to hold its shard. Shipping 100 prompts of 128K token ids takes
seconds; a process not ready after two minutes is stuck, not slow."""

CLOSE_GRACE_S = 5.0
"""How long a process asked to stop may take before it is terminated."""


@dataclass(frozen=True)
class StartRecord:
    """How the last batch was started, so that a start after every process was ready shows."""

    pids: tuple[int, ...]
    ready_s: tuple[float, ...]
    """Monotonic time at which each process held its shard, in shard order."""
    released_s: float
    """Monotonic time at which the parent released the processes (after the last ready)."""
    t0: float
    """The common start time every process sent its shard from."""


@dataclass(frozen=True)
class _Worker:
    process: BaseProcess
    conn: Connection

    def name(self) -> str:
        return f"client process {self.process.pid}"

    def send(self, message: object) -> None:
        """Send to the process; a process that is gone is a bench error, not a broken pipe."""
        try:
            self.conn.send(message)
        except OSError as error:
            raise self._exited() from error

    def receive(self) -> Any:
        """The process's next message; a process that exited is a bench error, not an EOF."""
        try:
            return self.conn.recv()
        except (EOFError, OSError) as error:
            raise self._exited() from error

    def _exited(self) -> BenchError:
        self.process.join(CLOSE_GRACE_S)
        code = self.process.exitcode
        return BenchError(f"{self.name()} exited (code {code}) during a batch")


class ShardPool:
    """Client processes kept across the batches of an arm; close it (or use `with`) when done.

    Starts no process until a batch needs one. A batch that fails (a process not ready in time,
    or gone) closes the pool, so the next batch starts from fresh processes.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 600.0,
        api_key: str | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        self._args = (base_url, timeout_s, api_key)
        self._ready_timeout_s = ready_timeout_s
        self._workers: list[_Worker] = []
        self.last_start: StartRecord | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """The process ids of the pool's running processes (none before the first batch)."""
        return [w.process.pid for w in self._workers if w.process.pid is not None]

    def run(
        self, items: Sequence[Scheduled], processes: int, *, start_delay_s: float = 0.0
    ) -> tuple[list[Receipt], ClientStats]:
        """Send a batch round-robin over `processes` of the pool's processes (no shard empty).

        `start_delay_s` is the earliest start after this call; the start is never before every
        process is ready.

        Raises:
            BenchError: a process was not ready within the ready timeout, or exited.
        """
        wall = time.perf_counter()
        processes = max(1, min(processes, len(items)))
        shards = [list(items[i::processes]) for i in range(processes)]
        try:
            results = self._batch(self._grow(processes), shards, wall + start_delay_s)
        except BaseException:
            self.close(grace_s=0.0)
            raise
        ordered: list[Receipt | None] = [None] * len(items)
        for index, result in enumerate(results):
            ordered[index::processes] = result.receipts
        receipts = [r for r in ordered if r is not None]
        return receipts, client_stats(results, time.perf_counter() - wall)

    def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """Stop every process: asked to first, terminated if still running after `grace_s`."""
        workers, self._workers = self._workers, []
        for worker in workers:
            with contextlib.suppress(OSError):
                worker.conn.send(None)
        for worker in workers:
            worker.process.join(grace_s)
            if worker.process.is_alive():
                worker.process.terminate()
                worker.process.join()
            worker.conn.close()

    def _grow(self, processes: int) -> list[_Worker]:
        """The first `processes` workers, starting those the pool does not have yet."""
        context = multiprocessing.get_context("fork")
        while len(self._workers) < processes:
            ours, theirs = context.Pipe()
            process = context.Process(
                target=_serve,
                args=(theirs, *self._args),
                name=f"sparkgate-client-{len(self._workers)}",
                daemon=True,  # never outlives the parent, even when it is killed
            )
            process.start()
            theirs.close()
            self._workers.append(_Worker(process, ours))
        return self._workers[:processes]

    def _batch(
        self, workers: list[_Worker], shards: list[list[Scheduled]], not_before: float
    ) -> list[ShardResult]:
        """Ship the shards, wait until every process holds its own, release them all at t0."""
        for worker, shard in zip(workers, shards, strict=True):
            worker.send(shard)
        ready = self._await_ready(workers)
        released = time.perf_counter()
        t0 = max(released + START_MARGIN_S, not_before)
        for worker in workers:
            worker.send(t0)
        pids = tuple(w.process.pid or 0 for w in workers)
        self.last_start = StartRecord(pids, tuple(ready), released, t0)
        return [worker.receive() for worker in workers]

    def _await_ready(self, workers: list[_Worker]) -> list[float]:
        """Every process's ready stamp, in worker order.

        Raises:
            BenchError: naming the processes not ready within the ready timeout.
        """
        deadline = time.perf_counter() + self._ready_timeout_s
        pending = {worker.conn: index for index, worker in enumerate(workers)}
        stamps = [0.0] * len(workers)
        while pending:
            answered = wait(list(pending), max(0.0, deadline - time.perf_counter()))
            if not answered:
                late = ", ".join(workers[index].name() for index in pending.values())
                raise BenchError(
                    f"{late} not ready within {self._ready_timeout_s:g} s of receiving a shard; "
                    "the batch is not sent"
                )
            for conn in answered:
                index = pending.pop(conn)  # type: ignore[call-overload]
                stamps[index] = workers[index].receive()
        return stamps


def _serve(conn: Connection, base_url: str, timeout_s: float, api_key: str | None) -> None:
    """A client process's life: per batch, take a shard, say ready, wait for t0, send, reply."""
    while (shard := _next_shard(conn)) is not None:
        conn.send(time.perf_counter())  # ready: the shard is unpickled and held
        t0 = conn.recv()
        if t0 is None:
            return
        conn.send(run_shard(base_url, shard, t0, timeout_s, api_key))


def _next_shard(conn: Connection) -> list[Scheduled] | None:
    """The next shard; None when told to stop or when the parent is gone."""
    parent = multiprocessing.parent_process()
    watched: list[Connection | int] = [conn]
    if parent is not None:
        watched.append(parent.sentinel)
    if conn not in wait(watched):
        return None
    try:
        shard: list[Scheduled] | None = conn.recv()
    except EOFError:
        return None
    return shard


def run_sharded(
    base_url: str,
    items: Sequence[Scheduled],
    *,
    processes: int = 1,
    timeout_s: float = 600.0,
    api_key: str | None = None,
    start_delay_s: float = 0.0,
) -> tuple[list[Receipt], ClientStats]:
    """Run one batch in this process, or round-robin over `processes` processes started for it.

    Runs of many batches keep a `ShardPool` instead, so processes are started once.
    """
    if processes <= 1:
        wall = time.perf_counter()
        shard = run_shard(base_url, list(items), wall + start_delay_s, timeout_s, api_key)
        return shard.receipts, client_stats([shard], time.perf_counter() - wall)
    with ShardPool(base_url, timeout_s=timeout_s, api_key=api_key) as pool:
        return pool.run(items, processes, start_delay_s=start_delay_s)
