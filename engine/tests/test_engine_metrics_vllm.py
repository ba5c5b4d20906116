"""`--metric-names vllm`: the engine's values under vLLM's names, labels and ITL buckets.

A vLLM harness reads the inter-token latency histogram as vLLM v1 writes it: one observation per
request given a token after its first, cumulative buckets, `engine` and `model_name` labels.
"""

from __future__ import annotations

from sparkengine.metrics import Metrics

LABELS = 'engine="0",model_name="m"'


def test_each_decoded_request_is_one_inter_token_observation_in_cumulative_buckets() -> None:
    metrics = Metrics("vllm", "m", kv_blocks=10, block_size=16)
    metrics.observe_step(0.5, 0.1, decoded=0)  # a prefill step: nobody's next token
    metrics.observe_step(0.02, 0.01, decoded=3)
    metrics.observe_step(0.06, 0.01, decoded=1)
    lines = metrics.render().splitlines()
    name = "vllm:inter_token_latency_seconds"
    assert f'{name}_bucket{{{LABELS},le="0.01"}} 0' in lines
    assert f'{name}_bucket{{{LABELS},le="0.025"}} 3' in lines
    assert f'{name}_bucket{{{LABELS},le="0.075"}} 4' in lines
    assert f'{name}_bucket{{{LABELS},le="+Inf"}} 4' in lines
    assert f"{name}_count{{{LABELS}}} 4" in lines
    total = next(line for line in lines if line.startswith(f"{name}_sum"))
    assert float(total.split()[-1]) == 0.02 * 3 + 0.06
    assert 'vllm:cache_config_info{block_size="16",num_gpu_blocks="10"} 1.0' in lines
    assert not any(line.startswith("sparkengine_") for line in lines)


def test_the_default_names_are_the_engines_own() -> None:
    lines = Metrics().render().splitlines()
    assert "sparkengine_requests_running 0" in lines
    assert not any(line.startswith("vllm:") for line in lines)
