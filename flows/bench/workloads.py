"""Pure definitions of every workload's numbers, computed from receipts alone.

Keeping these apart from I/O means each definition can be tested with hand-made receipts and
recomputed later from a record. Definitions follow reference/serving-benchmarks.md: tokens come
from usage, decode windows stop at the last token chunk, aggregate rates use the first-token to
last-token window across streams, TPOT excludes the first token.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from flows.bench.report import Receipt
from flows.bench.stats import geomean


def poisson_schedule(rate: float, requests: int, seed: int) -> list[float]:
    """Seeded Poisson arrival times (seconds), the first at 0; identical for equal seeds."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, requests - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q))


def _decode_rate(r: Receipt) -> float | None:
    """(tokens - 1) / (last - first token) of one stream."""
    tpot = r.tpot_s
    return 1.0 / tpot if tpot else None


def _window(receipts: Sequence[Receipt]) -> float:
    """From the earliest first token to the latest last token, across streams."""
    firsts = [r.sent_s + r.first_token_s for r in receipts if r.first_token_s is not None]
    lasts = [r.sent_s + r.last_token_s for r in receipts if r.last_token_s is not None]
    return max(lasts) - min(firsts) if firsts and lasts else 0.0


def _tokens(r: Receipt) -> int:
    return r.completion_tokens or 0


def all_ok(receipts: Sequence[Receipt]) -> bool:
    """A sample counts only when every request of it succeeded and reported usage."""
    return bool(receipts) and all(r.ok and r.completion_tokens for r in receipts)


def single_stream(receipts: Sequence[Receipt]) -> dict[str, float]:
    """TTFT p50, time per output token p50 (ms) and tok/s of requests sent one at a time."""
    ttfts = [r.ttft_s for r in receipts if r.ttft_s is not None]
    tpots = [r.tpot_s for r in receipts if r.tpot_s is not None]
    busy = sum(r.end_s for r in receipts if r.end_s is not None)
    out = {"tps": sum(map(_tokens, receipts)) / busy if busy else math.nan}
    if ttfts:
        out["ttft_p50_s"] = _pct(ttfts, 50)
    if tpots:
        out["tpot_p50_ms"] = 1e3 * _pct(tpots, 50)
    return {k: v for k, v in out.items() if math.isfinite(v)}


def closed_loop(receipts: Sequence[Receipt]) -> dict[str, float]:
    """Aggregate decode tok/s over the first-to-last token window, and the per-stream rate."""
    window = _window(receipts)
    out: dict[str, float] = {}
    if window > 0:
        out["tps"] = sum(max(_tokens(r) - 1, 0) for r in receipts) / window
    rates = [x for x in map(_decode_rate, receipts) if x]
    if rates:
        out["per_stream_tps"] = float(np.mean(rates))
    ttfts = [r.ttft_s for r in receipts if r.ttft_s is not None]
    if ttfts:
        out["ttft_s"] = float(np.mean(ttfts))
    return out


def poisson(receipts: Sequence[Receipt]) -> dict[str, float]:
    """Output tok/s, TTFT and TPOT percentiles, and how late requests were dispatched."""
    ends = [r.sent_s + r.end_s for r in receipts if r.end_s is not None]
    span = max(ends) - min(r.sent_s for r in receipts) if ends else 0.0
    out: dict[str, float] = {}
    if span > 0:
        out["output_tps"] = sum(map(_tokens, receipts)) / span
    ttfts = [r.ttft_s for r in receipts if r.ttft_s is not None]
    tpots = [r.tpot_s for r in receipts if r.tpot_s is not None]
    late = [r.sent_s - r.due_s for r in receipts if r.due_s is not None]
    if ttfts:
        out |= {"ttft_p50_s": _pct(ttfts, 50), "ttft_p99_s": _pct(ttfts, 99)}
    if tpots:
        out |= {"tpot_p50_ms": 1e3 * _pct(tpots, 50), "tpot_p99_ms": 1e3 * _pct(tpots, 99)}
    if late:
        out |= {"lateness_p50_ms": 1e3 * _pct(late, 50), "lateness_p99_ms": 1e3 * _pct(late, 99)}
    return out


def prefill(receipt: Receipt) -> dict[str, float]:
    """prefill tok/s = prompt tokens / TTFT (includes fixed request overhead, like the recipe)."""
    if not receipt.ttft_s or not receipt.prompt_tokens:
        return {}
    return {"prefill_tps": receipt.prompt_tokens / receipt.ttft_s, "ttft_s": receipt.ttft_s}


def shape_key(concurrency: int, context: int) -> str:
    """Metric name of one grid shape's step time."""
    return f"step_ms@c{concurrency}x{context}"


def step_grid(shapes: Mapping[str, Sequence[Receipt]]) -> dict[str, float]:
    """Step time per shape (mean TPOT of its streams, ms) and their geometric mean."""
    out: dict[str, float] = {}
    for key, receipts in shapes.items():
        tpots = [r.tpot_s for r in receipts if r.tpot_s]
        if tpots:
            out[key] = 1e3 * float(np.mean(tpots))
    if out and len(out) == len(shapes):
        out["step_geomean_ms"] = geomean(list(out.values()))
    return out


def prefix(cold: Receipt, warm: Sequence[Receipt]) -> dict[str, float]:
    """Cold and warm TTFT of the same prompt, and the share of warm prompt tokens cached."""
    out: dict[str, float] = {}
    if cold.ttft_s is not None:
        out["cold_ttft_s"] = cold.ttft_s
    ttfts = [r.ttft_s for r in warm if r.ttft_s is not None]
    if ttfts:
        out["warm_ttft_s"] = float(np.mean(ttfts))
    cached = [
        r.cached_tokens / r.prompt_tokens
        for r in warm
        if r.cached_tokens is not None and r.prompt_tokens
    ]
    if cached:
        out["warm_hit_rate"] = float(np.mean(cached))
    return out
