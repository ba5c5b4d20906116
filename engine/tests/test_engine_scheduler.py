"""Scheduler and prefix cache as pure logic: budgets, chunking, admission, hits, release."""

from __future__ import annotations

import numpy as np
from sparkengine import tokenizer
from sparkengine.prefix_cache import BlockPool, block_hashes
from sparkengine.sampling import SamplingParams
from sparkengine.scheduler import Scheduler, Sequence, TokenOut

V = tokenizer.VOCAB_SIZE


def _seq(rid: str, prompt_len: int, max_tokens: int = 4, sink: list[TokenOut] | None = None):
    prompt = [tokenizer.BOS] + [5 + (i * 7 + len(rid)) % 90 for i in range(prompt_len - 1)]
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    outs = sink if sink is not None else []
    return Sequence(rid, prompt, params, outs.append)


def _greedy_logprobs(rows: int, token: int = 10) -> np.ndarray:
    lp = np.full((rows, V), -10.0, np.float32)
    lp[:, token] = -0.01
    return lp


def _run_step(s: Scheduler):
    planned = s.schedule()
    assert planned is not None
    batch, plan = planned
    s.complete(plan, _greedy_logprobs(len(batch.sample_rows)))
    return batch, plan


def test_decodes_go_first_and_prefill_is_chunked_under_the_budget() -> None:
    s = Scheduler(BlockPool(64, 16), max_context=512, step_tokens=32, max_seqs=8)
    short = _seq("a", 5)
    s.submit(short)
    _run_step(s)  # prefill of the short prompt, first token sampled
    s.submit(_seq("b", 100))
    batch, plan = _run_step(s)
    assert [p.seq.request_id for p in plan] == ["a", "b"]
    assert [p.count for p in plan] == [1, 31]
    assert len(batch.tokens) == 32
    assert list(batch.sample_rows) == [0]  # the long prompt is not finished: no sample
    for _ in range(3):
        batch, plan = _run_step(s)
        assert len(batch.tokens) <= 32


def test_finished_sequences_release_blocks_and_emit_length() -> None:
    pool = BlockPool(8, 16)
    s = Scheduler(pool, max_context=128, step_tokens=64, max_seqs=4)
    outs: list[TokenOut] = []
    s.submit(_seq("a", 10, max_tokens=3, sink=outs))
    while (planned := s.schedule()) is not None:
        s.complete(planned[1], _greedy_logprobs(len(planned[0].sample_rows)))
    assert [o.finish_reason for o in outs] == [None, None, "length"]
    assert pool.available == 8


def test_prefix_cache_hit_skips_cached_blocks() -> None:
    pool = BlockPool(32, 16)
    s = Scheduler(pool, max_context=256, step_tokens=256, max_seqs=4)
    first: list[TokenOut] = []
    s.submit(_seq("x", 40, max_tokens=1, sink=first))
    _run_step(s)
    again: list[TokenOut] = []
    s.submit(_seq("x", 40, max_tokens=1, sink=again))
    batch, plan = _run_step(s)
    assert plan[0].start == 32  # two full blocks came from the cache
    assert len(batch.tokens) == 8
    assert again[0].cached_tokens == 32
    assert s.stats.prefix_hits == 32
    assert s.stats.prefix_queries == 80


def test_admission_waits_for_blocks_and_abort_frees_them() -> None:
    pool = BlockPool(4, 16)
    s = Scheduler(pool, max_context=64, step_tokens=64, max_seqs=4)
    s.submit(_seq("big", 20, max_tokens=40))  # needs 4 blocks: the whole pool
    s.submit(_seq("next", 5, max_tokens=2))
    _run_step(s)
    assert [q.request_id for q in s.waiting] == ["next"]
    s.abort("big")
    _, plan = _run_step(s)
    assert [p.seq.request_id for p in plan] == ["next"]
    assert not s.waiting


def test_block_hashes_chain_over_the_prefix() -> None:
    a = block_hashes(list(range(48)), 16, 3)
    b = block_hashes([99, *range(1, 48)], 16, 3)
    assert len(a) == 3
    assert all(x != y for x, y in zip(a, b, strict=True))  # a change early changes every hash


def test_pool_evicts_least_recently_used_cached_block() -> None:
    pool = BlockPool(2, 4)
    first = pool.allocate(2)
    assert first is not None
    pool.register(first[0], b"h0")
    pool.register(first[1], b"h1")
    pool.release([first[1]])
    pool.release([first[0]])
    assert pool.available == 2
    fresh = pool.allocate(1)
    assert fresh == [first[1]]  # released first, evicted first


def test_a_request_that_fails_while_sampling_ends_alone() -> None:
    s = Scheduler(BlockPool(64, 16), max_context=512, step_tokens=64, max_seqs=8)
    good: list[TokenOut] = []

    def broken_sink(_out: TokenOut) -> None:
        raise RuntimeError("client queue gone")

    s.submit(_seq("good", 5, max_tokens=3, sink=good))
    prompt = [tokenizer.BOS, 10, 11]
    s.submit(Sequence("bad", prompt, SamplingParams(max_tokens=3), broken_sink))
    for _ in range(10):
        if not s.has_work():
            break
        _run_step(s)
    assert [o.finish_reason for o in good] == [None, None, "length"]
    assert all(o.error is None for o in good)
    assert not s.running
    assert s.pool.available == 64  # the failed request's blocks came back


def test_the_request_seed_fault_fails_only_that_request() -> None:
    s = Scheduler(BlockPool(64, 16), max_context=512, step_tokens=64, max_seqs=8, failing_seed=7)
    good: list[TokenOut] = []
    bad: list[TokenOut] = []
    s.submit(_seq("good", 5, max_tokens=2, sink=good))
    params = SamplingParams(max_tokens=2, temperature=0.0, seed=7)
    s.submit(Sequence("bad", [tokenizer.BOS, 10], params, bad.append))
    _run_step(s)
    assert [o.error for o in bad] == ["EngineError"]
    assert [o.finish_reason for o in bad] == ["error"]
    _run_step(s)
    assert [o.finish_reason for o in good] == [None, "length"]
    assert not s.running
