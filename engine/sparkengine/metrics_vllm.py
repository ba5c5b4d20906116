"""The engine's metrics under vLLM's names, for harnesses configured for vLLM.

A serving recipe's harness (sparkgate's vllm-recipe profile) reads vLLM v1's exposition: request
gauges, token counters, prefix-cache counters in tokens, the inter-token latency histogram and
the cache configuration as an info gauge, each labelled with the served model's name. The names,
types and labels are vLLM's (vllm/v1/metrics/loggers.py, PrometheusStatLogger); the values are
this engine's. What differs: vLLM observes a request's inter-token latency from its own token
timestamps, here it is the step that produced the token (one observation per request given a
token after its first); the engine label is always 0 (one engine core).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkengine.metrics import Metrics


def render_vllm(metrics: Metrics) -> str:
    """The /metrics body with vLLM's names (the caller holds the metrics' lock)."""
    labels = f'engine="0",model_name="{metrics.model_name}"'
    lines: list[str] = []
    for name, kind, help_text, value in (
        ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
         metrics.running),
        ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         metrics.waiting),
        ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
         metrics.prompt_tokens),
        ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
         metrics.generation_tokens),
        ("vllm:prefix_cache_queries_total", "counter",
         "Prefix cache queries, in terms of number of queried tokens.", metrics.prefix_queries),
        ("vllm:prefix_cache_hits_total", "counter",
         "Prefix cache hits, in terms of number of cached tokens.", metrics.prefix_hits),
    ):  # fmt: skip
        lines += [
            f"# HELP {name} {help_text}",
            f"# TYPE {name} {kind}",
            f"{name}{{{labels}}} {value}",
        ]
    name = "vllm:inter_token_latency_seconds"
    lines += [
        f"# HELP {name} Histogram of inter-token latency in seconds.",
        f"# TYPE {name} histogram",
    ]
    lines += metrics.itl.lines(name, labels)
    if metrics.kv_blocks and metrics.block_size:
        name = "vllm:cache_config_info"
        info = f'block_size="{metrics.block_size}",num_gpu_blocks="{metrics.kv_blocks}"'
        lines += [f"# HELP {name} Information of the LLMEngine CacheConfig", f"# TYPE {name} gauge",
                  f"{name}{{{info}}} 1.0"]  # fmt: skip
    return "\n".join(lines) + "\n"
