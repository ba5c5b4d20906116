"""The peer check's arithmetic: guidellm's report and our receipts, side by side (pure).

Two tools that time the same load differently cannot be compared by their headline numbers
alone. So every load gets three columns: what guidellm reports (its own definitions), what
guidellm's own per-request timestamps give under OUR definitions, and what our generator
measured. When guidellm's raw timings agree with ours but its headline does not, the gap is a
definition; when its raw timings disagree too, the gap is in the measurement (stamping, client,
prompts, noise). On a shared machine the engine's speed drifts between runs, so each run's
numbers are also divided by the engine's own mean step time during that run (from its metrics):
those per-step rows compare the tools with the drift taken out. See docs/peer-check.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from flows.bench.report import Receipt
from flows.errors import BenchError

_FROZEN = ConfigDict(frozen=True, extra="forbid")
FLAG_PCT = 3.0
METRICS: dict[str, str] = {
    "ttft_p50_ms": "TTFT p50 (ms)",
    "ttft_mean_ms": "TTFT mean (ms)",
    "itl_p50_ms": "ITL p50 (ms)",
    "itl_mean_ms": "ITL mean (ms)",
    "output_tps": "output tok/s",
    "decode_window_tps": "decode tok/s (token window)",
}
NORMALIZED: dict[str, str] = {
    "engine_step_ms": "engine step mean (ms, server)",
    "itl_mean_per_step": "ITL mean / engine step",
    "ttft_mean_per_step": "TTFT mean / engine step",
    "output_tokens_per_step": "output tokens per engine step",
}


class Timing(BaseModel):
    """One request's stamps in seconds on one clock (any origin), and its output tokens."""

    model_config = _FROZEN

    start: float = Field(description="when the request was sent")
    first_token: float = Field(description="first chunk carrying output")
    last_token: float = Field(description="last chunk carrying output")
    end: float = Field(description="end of the stream")
    output_tokens: int = Field(ge=0, description="usage.completion_tokens")
    cached_tokens: int = Field(default=0, ge=0, description="prompt tokens served from cache")


class LoadMetrics(BaseModel):
    """The compared numbers of one load; None where a tool does not define one."""

    model_config = _FROZEN

    requests: int
    ttft_p50_ms: float | None = None
    ttft_mean_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_mean_ms: float | None = None
    output_tps: float | None = None
    decode_window_tps: float | None = None


class EngineWindow(BaseModel):
    """The engine's own step counters over one run (deltas of its Prometheus histogram).

    The shared machine's speed drifts by tens of percent between runs; the engine's step time
    during each run is the yardstick that drift does not bias, so tools are compared on their
    numbers divided by it.
    """

    model_config = _FROZEN

    steps: float = Field(ge=0, description="engine steps during the run")
    step_seconds: float = Field(ge=0, description="their summed duration")

    @staticmethod
    def between(before: Mapping[str, float], after: Mapping[str, float]) -> EngineWindow:
        """The window from two snapshots holding `step_count` and `step_sum`."""
        return EngineWindow(
            steps=after["step_count"] - before["step_count"],
            step_seconds=after["step_sum"] - before["step_sum"],
        )

    def __add__(self, other: EngineWindow) -> EngineWindow:
        return EngineWindow(
            steps=self.steps + other.steps, step_seconds=self.step_seconds + other.step_seconds
        )

    @property
    def step_ms(self) -> float | None:
        """Mean engine step in ms (prefill and decode steps alike)."""
        return 1e3 * self.step_seconds / self.steps if self.steps else None


def _ratio(value: float | None, step_ms: float | None) -> float | None:
    return value / step_ms if value is not None and step_ms else None


def per_step(metrics: LoadMetrics, window: EngineWindow | None) -> dict[str, float | None]:
    """Numbers in units of the engine's mean step during the same run (drift cancels).

    ITL / step (about 1 when every step yields one token per stream) and output tokens per
    step (about the number of streams when decode dominates).
    """
    step = window.step_ms if window else None
    tps = metrics.output_tps
    return {
        "engine_step_ms": step,
        "itl_mean_per_step": _ratio(metrics.itl_mean_ms, step),
        "ttft_mean_per_step": _ratio(metrics.ttft_mean_ms, step),
        "output_tokens_per_step": tps * step / 1e3 if tps is not None and step else None,
    }


class GuidellmBenchmark(BaseModel):
    """One sub-benchmark of a guidellm report: its streams, headline numbers and raw timings."""

    model_config = _FROZEN

    streams: int
    reported: LoadMetrics
    timings: list[Timing]


def our_definitions(timings: Sequence[Timing]) -> LoadMetrics:
    """Our generator's definitions, applied to any tool's per-request stamps.

    TTFT from send to the first output chunk; ITL per request = (last - first) / (tokens - 1),
    its p50 across requests (linear interpolation) and its token-weighted mean; output tok/s =
    all output tokens / (last end - first send); decode tok/s = sum(tokens - 1) over the
    earliest-first-token to latest-last-token window (the closed-loop gate's number).
    """
    if not timings:
        return LoadMetrics(requests=0)
    ttfts = [1e3 * (t.first_token - t.start) for t in timings]
    multi = [t for t in timings if t.output_tokens > 1]
    itls = [1e3 * (t.last_token - t.first_token) / (t.output_tokens - 1) for t in multi]
    gaps = sum(t.last_token - t.first_token for t in multi)
    steps = sum(t.output_tokens - 1 for t in multi)
    span = max(t.end for t in timings) - min(t.start for t in timings)
    window = max(t.last_token for t in timings) - min(t.first_token for t in timings)
    return LoadMetrics(
        requests=len(timings),
        ttft_p50_ms=float(np.percentile(ttfts, 50)),
        ttft_mean_ms=float(np.mean(ttfts)),
        itl_p50_ms=float(np.percentile(itls, 50)) if itls else None,
        itl_mean_ms=1e3 * gaps / steps if steps else None,
        output_tps=sum(t.output_tokens for t in timings) / span if span > 0 else None,
        decode_window_tps=steps / window if window > 0 else None,
    )


def receipt_timings(receipts: Sequence[Receipt]) -> list[Timing]:
    """Our receipts as timings (successful ones only; sent_s is the shared origin).

    Raises:
        BenchError: when a request failed or reported no usage (the load was not what was asked).
    """
    out = []
    for r in receipts:
        if not r.ok or r.first_token_s is None or r.last_token_s is None or r.end_s is None:
            raise BenchError(f"our generator: a request failed: {r.error}")
        if r.completion_tokens is None:
            raise BenchError("our generator: a response carried no usage")
        out.append(
            Timing(
                start=r.sent_s,
                first_token=r.sent_s + r.first_token_s,
                last_token=r.sent_s + r.last_token_s,
                end=r.sent_s + r.end_s,
                output_tokens=r.completion_tokens,
                cached_tokens=r.cached_tokens or 0,
            )
        )
    return out


def _get(data: Mapping[str, Any], path: str) -> Any:
    node: Any = data
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            raise BenchError(f"guidellm report: missing {path}")
        node = node[key]
    return node


def _number(data: Mapping[str, Any], path: str) -> float | None:
    value = _get(data, path)
    if value is None:
        return None
    if not isinstance(value, int | float):
        raise BenchError(f"guidellm report: {path} is not a number")
    return float(value)


def _streams(benchmark: Mapping[str, Any]) -> int:
    strategy = _get(benchmark, "config.strategy")
    if strategy.get("type_") == "synchronous":
        return 1
    streams = strategy.get("streams")
    if not isinstance(streams, int):
        raise BenchError(f"guidellm report: strategy {strategy.get('type_')!r} has no streams")
    return streams


def _request_timing(request: Mapping[str, Any]) -> Timing:
    stamps = _get(request, "info.timings")
    names = ("request_start", "first_token_iteration", "last_token_iteration", "request_end")
    values = [stamps.get(name) for name in names]
    if any(not isinstance(v, int | float) for v in values):
        raise BenchError(f"guidellm report: request {request.get('request_id')} lacks timings")
    output = _get(request, "output_metrics.text_tokens")
    cached = (request.get("input_metrics") or {}).get("cached_tokens") or 0
    return Timing(
        start=values[0],
        first_token=values[1],
        last_token=values[2],
        end=values[3],
        output_tokens=int(output or 0),
        cached_tokens=int(cached),
    )


def parse_guidellm(report: Mapping[str, Any]) -> list[GuidellmBenchmark]:
    """Each sub-benchmark of a guidellm JSON report (schema of guidellm 0.8).

    Headline numbers are the `successful` summaries guidellm prints; the raw timings are its
    per-request stamps (wall clock), kept for recomputing under our definitions.

    Raises:
        BenchError: naming the missing or malformed field.
    """
    benchmarks = report.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise BenchError("guidellm report: no benchmarks")
    out = []
    for benchmark in benchmarks:
        m = "metrics"
        ok = "successful"
        successful = _get(benchmark, "requests.successful") or []
        reported = LoadMetrics(
            requests=len(successful),
            ttft_p50_ms=_number(benchmark, f"{m}.time_to_first_token_ms.{ok}.median"),
            ttft_mean_ms=_number(benchmark, f"{m}.time_to_first_token_ms.{ok}.mean"),
            itl_p50_ms=_number(benchmark, f"{m}.inter_token_latency_ms.{ok}.median"),
            itl_mean_ms=_number(benchmark, f"{m}.inter_token_latency_ms.{ok}.mean"),
            output_tps=_number(benchmark, f"{m}.output_tokens_per_second.{ok}.mean"),
        )
        timings = [_request_timing(r) for r in successful]
        out.append(
            GuidellmBenchmark(streams=_streams(benchmark), reported=reported, timings=timings)
        )
    return out


class Row(BaseModel):
    """One metric of one load in the three columns, with the gaps to ours in percent."""

    model_config = _FROZEN

    load: str
    metric: str
    guidellm: float | None
    guidellm_ours: float | None = Field(description="guidellm's timings, our definitions")
    ours: float | None
    gap_reported_pct: float | None = Field(description="guidellm reported vs ours")
    gap_timings_pct: float | None = Field(description="guidellm timings (our defs) vs ours")
    repeat_pct: float | None = Field(default=None, description="our second run vs our first")

    @property
    def flagged(self) -> bool:
        """Whether either gap exceeds the 3 % the note must explain."""
        gaps = (self.gap_reported_pct, self.gap_timings_pct)
        return any(g is not None and abs(g) > FLAG_PCT for g in gaps)


def gap_pct(theirs: float | None, ours: float | None) -> float | None:
    """(theirs - ours) / ours in percent; None when either is missing or ours is zero."""
    if theirs is None or ours is None or ours == 0 or not math.isfinite(theirs):
        return None
    return 100.0 * (theirs - ours) / ours


def pooled(first: Sequence[Timing], second: Sequence[Timing]) -> LoadMetrics:
    """Our two runs of a load as one column: latencies pooled, throughputs averaged.

    Each run's stamps have their own origin, so throughput (a span) is computed per run.
    """
    a, b = our_definitions(first), our_definitions(second)
    both = our_definitions([*first, *second])
    return both.model_copy(
        update={
            "output_tps": _mean(a.output_tps, b.output_tps),
            "decode_window_tps": _mean(a.decode_window_tps, b.decode_window_tps),
        }
    )


def _mean(x: float | None, y: float | None) -> float | None:
    return (x + y) / 2 if x is not None and y is not None else None


class Windows(BaseModel):
    """The engine's step windows during guidellm's run and our two runs of one load."""

    model_config = _FROZEN

    guidellm: EngineWindow
    first: EngineWindow
    second: EngineWindow


def _columns(
    theirs: GuidellmBenchmark,
    first: Sequence[Timing],
    second: Sequence[Timing],
    windows: Windows | None,
) -> dict[str, list[float | None]]:
    """metric -> (guidellm, guidellm timings on our defs, ours pooled, ours run 1, ours run 2)."""
    recomputed = our_definitions(theirs.timings)
    ours = pooled(first, second)
    run1, run2 = our_definitions(first), our_definitions(second)
    out: dict[str, list[float | None]] = {}
    for metric in METRICS:
        values = (theirs.reported, recomputed, ours, run1, run2)
        out[metric] = [getattr(v, metric) for v in values]
    out["requests"] = [theirs.reported.requests, recomputed.requests, run1.requests, None, None]
    if windows:
        first_steps = per_step(run1, windows.first)
        second_steps = per_step(run2, windows.second)
        # ours: each run against its own window, then averaged (a rate from one run times a
        # step from another would mix two machine speeds)
        ours_steps = {k: _mean(first_steps[k], second_steps[k]) for k in first_steps}
        ours_steps["engine_step_ms"] = (windows.first + windows.second).step_ms
        normalized = [
            per_step(theirs.reported, windows.guidellm),
            per_step(recomputed, windows.guidellm),
            ours_steps,
            first_steps,
            second_steps,
        ]
        for metric in NORMALIZED:
            out[metric] = [n[metric] for n in normalized]
    return out


def compare(
    load: str,
    theirs: GuidellmBenchmark,
    first: Sequence[Timing],
    second: Sequence[Timing],
    windows: Windows | None = None,
) -> list[Row]:
    """The rows of one load: every metric, request counts (ours per run), and with the
    engine's step windows the drift-free per-step rows. Ours is our two runs pooled; their
    gap to each other is the session's noise floor for this load."""
    rows = []
    for metric, (a, b, c, run1, run2) in _columns(theirs, first, second, windows).items():
        rows.append(
            Row(
                load=load,
                metric=metric,
                guidellm=a,
                guidellm_ours=b,
                ours=c,
                gap_reported_pct=gap_pct(a, c),
                gap_timings_pct=gap_pct(b, c),
                repeat_pct=gap_pct(run2, run1),
            )
        )
    return rows


def cached_total(timings: Sequence[Timing]) -> int:
    """Prompt tokens served from the prefix cache (must be 0: every prompt is distinct)."""
    return sum(t.cached_tokens for t in timings)


def _cell(value: float | None, pct: bool = False) -> str:
    if value is None:
        return "-"
    if pct:
        return f"{value:+.1f} %"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def markdown_table(rows: Sequence[Row]) -> str:
    """The comparison as a markdown table (the note embeds it verbatim)."""
    head = (
        "| load | metric | guidellm | guidellm timings, our defs | ours | gap reported | "
        "gap timings | our repeat | > 3 % |"
    )
    lines = [
        head,
        "|---|---|---:|---:|---:|---:|---:|---:|:-:|",
    ]
    for r in rows:
        name = METRICS.get(r.metric) or NORMALIZED.get(r.metric) or r.metric
        lines.append(
            f"| {r.load} | {name} | {_cell(r.guidellm)} | {_cell(r.guidellm_ours)} | "
            f"{_cell(r.ours)} | {_cell(r.gap_reported_pct, True)} | "
            f"{_cell(r.gap_timings_pct, True)} | {_cell(r.repeat_pct, True)} | "
            f"{'yes' if r.flagged else ''} |"
        )
    return "\n".join(lines)
