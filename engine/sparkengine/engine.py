"""The step loops: rank 0 schedules, broadcasts and samples; workers follow its steps.

Rank 0 runs this in a thread beside the HTTP server. When idle it pings the workers every
second, so a worker hears from rank 0 within its collective timeout even without traffic.
Any collective or peer failure is logged as a named record and ends the process non-zero.
"""

from __future__ import annotations

import json
import os
import threading
import time

from sparkengine import events, tokenizer
from sparkengine.collectives import Group, Msg
from sparkengine.errors import CollectiveTimeoutError, EngineError, PeerFailureError
from sparkengine.faults import Faults
from sparkengine.forward import Forward, StepBatch
from sparkengine.metrics import Metrics
from sparkengine.sampling import SamplingParams
from sparkengine.scheduler import Scheduler, Sequence, Stats, TokenOut

IDLE_PING_S = 1.0


def fail(exc: BaseException) -> None:
    """Log the named failure record(s) and exit non-zero at once."""
    if isinstance(exc, CollectiveTimeoutError):
        events.emit(
            "collective_failure",
            peer=exc.peer,
            seq=exc.seq,
            phase=exc.phase,
            timeout_s=exc.timeout_s,
        )
    elif isinstance(exc, PeerFailureError):
        events.emit("peer_failure", peer=exc.peer, reason=exc.reason)
    events.emit("fatal", error=type(exc).__name__, message=str(exc))
    os._exit(1)


class HeadEngine:
    """Rank 0's loop: owns the scheduler and drives every rank's forward pass."""

    def __init__(self, forward: Forward, scheduler: Scheduler, group: Group, metrics: Metrics):
        self.forward = forward
        self.scheduler = scheduler
        self.group = group
        self.metrics = metrics
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)

    def submit(self, seq: Sequence) -> None:
        """Hand a request to the scheduler (any thread)."""
        self.scheduler.submit(seq)
        self._wake.set()

    def abort(self, request_id: str) -> None:
        """Stop generating for a request (any thread)."""
        self.scheduler.abort(request_id)
        self._wake.set()

    def warmup(self) -> float:
        """Run one short request through every kernel and collective; return seconds."""
        started = time.perf_counter()
        outs: list[TokenOut] = []
        prompt = tokenizer.encode("warm-up: " + "0123456789" * 4)
        params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True, logprobs=2)
        self.scheduler.submit(Sequence("warmup", prompt, params, outs.append))
        while not outs or outs[-1].finish_reason is None:
            if not self.step():
                raise EngineError("warm-up request did not finish")
        self.scheduler.pool.reset()
        self.scheduler.stats = Stats()  # warm-up is not traffic
        self.group.broadcast(Msg.CONTROL, json.dumps({"warmup_done": True}).encode())
        return round(time.perf_counter() - started, 3)

    def start(self) -> None:
        """Serve traffic in the background."""
        self.group.phase = "serve"
        self._thread.start()

    def stop(self) -> None:
        """Tell the workers to stop, then stop the loop."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)
        for link in self.group.links.values():
            link.send(Msg.STOP)

    def step(self) -> bool:
        """Run one step if there is work; False when idle."""
        planned = self.scheduler.schedule()
        self._publish_gauges()
        if planned is None:
            return False
        batch, plan = planned
        # the requests this step gives a token after their first (vLLM's inter-token latency)
        decoded = sum(
            1 for item in plan if item.samples and len(item.seq.tokens) > len(item.seq.prompt)
        )
        started, cpu_started = time.perf_counter(), time.thread_time()
        self.group.broadcast(Msg.STEP, batch.encode())
        logprobs = self.forward.run(batch)
        self.scheduler.complete(plan, logprobs)
        self.metrics.observe_step(
            time.perf_counter() - started, time.thread_time() - cpu_started, decoded
        )
        self._publish_gauges()
        return True

    def _publish_gauges(self) -> None:
        stats, m = self.scheduler.stats, self.metrics
        m.running, m.waiting = len(self.scheduler.running), len(self.scheduler.waiting)
        m.prompt_tokens, m.generation_tokens = stats.prompt_tokens, stats.generation_tokens
        m.prefix_queries, m.prefix_hits = stats.prefix_queries, stats.prefix_hits

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                if self.step():
                    continue
                self._wake.clear()
                if not self.scheduler.has_work() and not self._wake.wait(IDLE_PING_S):
                    self.group.broadcast(Msg.PING, b"")
        except Exception as exc:  # noqa: BLE001 - any failure ends the rank with a record
            fail(exc)


def worker_loop(forward: Forward, group: Group, faults: Faults, warmup_started: float) -> None:
    """A worker's life after rendezvous: follow rank 0's steps until told to stop."""
    group.phase = "warmup"
    faults.enter(group.rank, "warmup")
    while True:
        _, payload = _next_frame(group)
        if payload is None:
            events.emit("stopping", reason="rank 0 asked")
            return
        kind, data = payload
        if kind == Msg.STEP:
            forward.run(StepBatch.decode(data))
        elif kind == Msg.CONTROL and json.loads(data).get("warmup_done"):
            events.emit("warmup", seconds=round(time.perf_counter() - warmup_started, 3))
            group.phase = "serve"
            faults.enter(group.rank, "serve")


def _next_frame(group: Group) -> tuple[int, tuple[Msg, bytes] | None]:
    link = group.links[0]
    try:
        kind, seq, data = link.recv(group.timeout)
    except TimeoutError:
        raise CollectiveTimeoutError(0, group.seq, group.phase, group.timeout) from None
    except OSError as exc:
        raise PeerFailureError(0, f"connection error: {exc}") from None
    if kind == Msg.STOP:
        return seq, None
    return seq, (kind, data)
