"""Prometheus text exposition of rank 0's counters, gauges and step-time histogram.

Beside each step's wall time, rank 0 reports the CPU time its engine thread spent in the step
(`sparkengine_step_cpu_seconds`): on a shared machine the wall time also counts the moments the
operating system ran something else, the CPU time only the engine's own work, which is what a
release changes (the analogue of kernel time on a GPU).

`--metric-names vllm` exports the same values under vLLM's names instead (metrics_vllm.py), so a
harness configured for vLLM reads the engine as it reads vLLM.
"""

from __future__ import annotations

import bisect
import threading

STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# vLLM's vllm:inter_token_latency_seconds buckets (vllm/v1/metrics/loggers.py).
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)  # fmt: skip


class Metrics:
    """Values updated by the engine loop and read by /metrics."""

    def __init__(self, names: str = "sparkengine", model_name: str = "sparkengine",
                 kv_blocks: int = 0, block_size: int = 0) -> None:  # fmt: skip
        self.names, self.model_name = names, model_name
        self.kv_blocks, self.block_size = kv_blocks, block_size
        self._lock = threading.Lock()
        self.running = 0
        self.waiting = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.compiles_after_freeze = 0
        self.steps = Histogram(STEP_BUCKETS)  # one observation per step, its wall time
        self._step_cpu_sum = 0.0
        # one observation per request given a token after its first, at vLLM's ITL buckets
        self.itl = Histogram(ITL_BUCKETS)

    def observe_step(self, seconds: float, cpu_seconds: float = 0.0, decoded: int = 0) -> None:
        """Add one step's wall duration to the histogram and its engine-thread CPU time; the
        `decoded` requests it gave a token after their first waited `seconds` for it."""
        with self._lock:
            self._step_cpu_sum += cpu_seconds
            self.steps.observe(seconds)
            self.itl.observe(seconds, decoded)

    def render(self) -> str:
        """The /metrics body, under the names this engine was told to export."""
        if self.names == "vllm":
            from sparkengine.metrics_vllm import render_vllm  # noqa: PLC0415 - one dialect

            with self._lock:
                return render_vllm(self)
        lines: list[str] = []

        def one(name: str, kind: str, help_text: str, value: float) -> None:
            lines.extend([f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"])

        with self._lock:
            one("sparkengine_requests_running", "gauge", "Requests in the batch.", self.running)
            one("sparkengine_requests_waiting", "gauge", "Requests queued.", self.waiting)
            one(
                "sparkengine_prompt_tokens_total",
                "counter",
                "Prompt tokens admitted.",
                self.prompt_tokens,
            )
            one(
                "sparkengine_generation_tokens_total",
                "counter",
                "Tokens generated.",
                self.generation_tokens,
            )
            one(
                "sparkengine_prefix_cache_queries_total",
                "counter",
                "Prompt tokens looked up in the prefix cache.",
                self.prefix_queries,
            )
            one(
                "sparkengine_prefix_cache_hits_total",
                "counter",
                "Prompt tokens served from the prefix cache.",
                self.prefix_hits,
            )
            one(
                "sparkengine_compiles_after_freeze_total",
                "counter",
                "Kernel compilations after the registry was frozen.",
                self.compiles_after_freeze,
            )
            name = "sparkengine_step_seconds"
            lines += [f"# HELP {name} Duration of one engine step.", f"# TYPE {name} histogram"]
            lines += self.steps.lines(name)
            name = "sparkengine_step_cpu_seconds"
            lines += [
                f"# HELP {name} CPU time of rank 0's engine thread in steps.",
                f"# TYPE {name} summary",
                f"{name}_sum {self._step_cpu_sum}",
                f"{name}_count {self.steps.count}",
            ]
        return "\n".join(lines) + "\n"


class Histogram:
    """A Prometheus histogram: per-bucket counts (rendered cumulative), sum and count."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        """Add `value` observed `times` times (nothing when times is 0)."""
        if times <= 0:
            return
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.buckets):
            self.counts[index] += times
        self.sum += value * times
        self.count += times

    def lines(self, name: str, labels: str = "") -> list[str]:
        """The `_bucket`, `_sum` and `_count` samples, `labels` (if any) inside every brace."""
        out, cumulative, first = [], 0, f"{labels}," if labels else ""
        for bound, count in zip(self.buckets, self.counts, strict=True):
            cumulative += count
            out.append(f'{name}_bucket{{{first}le="{bound}"}} {cumulative}')
        out.append(f'{name}_bucket{{{first}le="+Inf"}} {self.count}')
        braced = f"{{{labels}}}" if labels else ""
        return [*out, f"{name}_sum{braced} {self.sum}", f"{name}_count{braced} {self.count}"]
