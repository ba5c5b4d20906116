"""KV capacity from an engine's cache-config info gauge (vLLM's format), reported only."""

from __future__ import annotations

from flows.bench.capacity import kv_capacity


def test_blocks_times_block_size_or_the_engine_s_own_token_count() -> None:
    line = 'vllm:cache_config_info{block_size="256",engine="0",num_gpu_blocks="4096"} 1.0\n'
    assert kv_capacity("# TYPE vllm:cache_config_info gauge\n" + line) == {
        "kv_blocks": 4096.0,
        "kv_block_size": 256.0,
        "kv_capacity_tokens": 4096.0 * 256,
    }
    newer = (
        'vllm:cache_config_info{block_size="16",kv_cache_size_tokens="10576",'
        'num_gpu_blocks="661"} 1\n'
    )
    assert kv_capacity(newer)["kv_capacity_tokens"] == 10576


def test_absent_or_unset_capacity_is_not_reported() -> None:
    assert kv_capacity("vllm:num_requests_running 0\n") == {}
    unset = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1\n'
    assert kv_capacity(unset) == {"kv_block_size": 16.0}
