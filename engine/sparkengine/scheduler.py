"""Continuous batching on rank 0: which rows run in the next step, and what came out of it.

Each step takes every decoding sequence's next token first, then fills the rest of the token
budget with prompt chunks (chunked prefill), admitting waiting requests first come first served
while KV blocks allow. Blocks for a request's whole length are reserved on admission, so a
running sequence never has to be preempted. Pure logic: no sockets, no clocks, no threads
except the inbox lock that lets the HTTP side submit and abort.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sparkengine import events, tokenizer
from sparkengine.errors import EngineError
from sparkengine.forward import StepBatch
from sparkengine.prefix_cache import BlockPool, block_hashes
from sparkengine.sampling import SamplingParams, sample, top_logprobs


@dataclass(frozen=True)
class TokenOut:
    """One generated token as the HTTP side receives it."""

    token: int
    logprob: float
    top: list[tuple[int, float]] | None
    finish_reason: str | None
    cached_tokens: int
    error: str | None = None  # this request failed inside the engine; nothing follows


@dataclass(eq=False)
class Sequence:
    """A request inside the engine."""

    request_id: str
    prompt: list[int]
    params: SamplingParams
    sink: Callable[[TokenOut], None]
    tokens: list[int] = field(default_factory=list)
    computed: int = 0
    blocks: list[int] = field(default_factory=list)
    cached_tokens: int = 0
    registered: int = 0
    rng: np.random.Generator = field(default_factory=np.random.default_rng)

    def __post_init__(self) -> None:
        self.tokens = list(self.prompt)
        self.rng = np.random.default_rng(self.params.seed)


@dataclass(frozen=True)
class Slice:
    """Rows [start, start+count) of one sequence in a step."""

    seq: Sequence
    start: int
    count: int

    @property
    def samples(self) -> bool:
        """Whether the step produces this sequence's next token."""
        return self.start + self.count == len(self.seq.tokens)


@dataclass
class Stats:
    """Counters rank 0 exports as metrics."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0


class Scheduler:
    """Waiting and running sequences over one block pool."""

    def __init__(
        self,
        pool: BlockPool,
        *,
        max_context: int,
        step_tokens: int,
        max_seqs: int,
        failing_seed: int | None = None,
    ) -> None:
        self.pool = pool
        self.failing_seed = failing_seed  # fault switch: requests with this seed fail
        self.max_context = max_context
        self.step_tokens = step_tokens
        self.max_seqs = max_seqs
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.stats = Stats()
        self._inbox: deque[Sequence] = deque()
        self._aborts: set[str] = set()
        self._lock = threading.Lock()

    def submit(self, seq: Sequence) -> None:
        """Queue a request (any thread)."""
        with self._lock:
            self._inbox.append(seq)

    def abort(self, request_id: str) -> None:
        """Drop a request wherever it is (any thread); its sink hears nothing more."""
        with self._lock:
            self._aborts.add(request_id)

    def blocks_needed(self, prompt_len: int, max_tokens: int) -> int:
        """Blocks reserved for a request of this size."""
        total = min(prompt_len + max_tokens, self.max_context)
        return math.ceil(total / self.pool.block_size)

    def has_work(self) -> bool:
        """Whether a step would do anything (or new input is waiting)."""
        return bool(self.running or self.waiting or self._inbox or self._aborts)

    def schedule(self) -> tuple[StepBatch, list[Slice]] | None:
        """Plan the next step, or None when there is nothing to run."""
        self._drain_inbox()
        self._admit()
        budget = self.step_tokens
        plan: list[Slice] = []
        decodes = [s for s in self.running if len(s.tokens) - s.computed == 1]
        prefills = [s for s in self.running if len(s.tokens) - s.computed > 1]
        for seq in decodes + prefills:
            count = min(len(seq.tokens) - seq.computed, budget)
            if count <= 0:
                break
            plan.append(Slice(seq, seq.computed, count))
            budget -= count
        if not plan:
            return None
        return _batch(plan), plan

    def complete(self, plan: list[Slice], logprobs: np.ndarray | None) -> None:
        """Account for a finished step: advance, sample, register blocks, finish."""
        row = 0
        for item in plan:
            seq = item.seq
            seq.computed += item.count
            self._register_full_blocks(seq)
            if item.samples and logprobs is not None:
                try:
                    self._emit(seq, logprobs[row])
                except Exception as exc:  # noqa: BLE001 - one request's failure is its own
                    self._fail(seq, exc)
                row += 1

    def _fail(self, seq: Sequence, exc: Exception) -> None:
        """End one request with an error; the engine and every other request go on."""
        events.emit(
            "request_error", request=seq.request_id, error=type(exc).__name__, message=str(exc)
        )
        if seq in self.running:
            self._finish(seq)
        with contextlib.suppress(Exception):  # a sink that fails again has nobody to tell
            seq.sink(TokenOut(0, 0.0, None, "error", seq.cached_tokens, type(exc).__name__))

    def _emit(self, seq: Sequence, row: np.ndarray) -> None:
        params = seq.params
        if self.failing_seed is not None and params.seed == self.failing_seed:
            raise EngineError(f"fault: sampling failed for seed {params.seed}")
        token = sample(row, params, seq.rng)
        seq.tokens.append(token)
        self.stats.generation_tokens += 1
        generated = len(seq.tokens) - len(seq.prompt)
        finish = None
        if token == tokenizer.EOS and not params.ignore_eos:
            finish = "stop"
        elif generated >= params.max_tokens or len(seq.tokens) >= self.max_context:
            finish = "length"
        top = top_logprobs(row, params.logprobs) if params.logprobs else None
        seq.sink(TokenOut(token, float(row[token]), top, finish, seq.cached_tokens))
        if finish is not None:
            self._finish(seq)

    def _finish(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.pool.release(seq.blocks)
        seq.blocks = []

    def _register_full_blocks(self, seq: Sequence) -> None:
        full = seq.computed // self.pool.block_size
        if full > seq.registered:
            hashes = block_hashes(seq.tokens, self.pool.block_size, full)
            for b in range(seq.registered, full):
                self.pool.register(seq.blocks[b], hashes[b])
            seq.registered = full

    def _drain_inbox(self) -> None:
        with self._lock:
            self.waiting.extend(self._inbox)
            self._inbox.clear()
            aborts, self._aborts = self._aborts, set()
        for seq in [s for s in self.running if s.request_id in aborts]:
            self._finish(seq)
        self.waiting = deque(s for s in self.waiting if s.request_id not in aborts)

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_seqs:
            seq = self.waiting[0]
            matched = self.pool.match(seq.prompt)
            need = self.blocks_needed(len(seq.prompt), seq.params.max_tokens) - len(matched)
            fresh = self.pool.allocate(need)
            if fresh is None:
                self.pool.release(matched)
                return
            self.waiting.popleft()
            seq.blocks = matched + fresh
            seq.computed = seq.cached_tokens = len(matched) * self.pool.block_size
            seq.registered = len(matched)
            self.stats.prompt_tokens += len(seq.prompt)
            self.stats.prefix_queries += len(seq.prompt)
            self.stats.prefix_hits += seq.cached_tokens
            self.running.append(seq)


def _batch(plan: list[Slice]) -> StepBatch:
    tokens: list[int] = []
    positions: list[int] = []
    starts: list[int] = []
    tables: list[int] = []
    samples: list[int] = []
    for item in plan:
        offset = len(tables)
        tables.extend(item.seq.blocks)
        for pos in range(item.start, item.start + item.count):
            tokens.append(item.seq.tokens[pos])
            positions.append(pos)
            starts.append(offset)
        if item.samples:
            samples.append(len(tokens) - 1)
    i32 = np.int32
    return StepBatch(
        np.array(tokens, i32),
        np.array(positions, i32),
        np.array(tables, i32),
        np.array(starts, i32),
        np.array(samples, i32),
    )
