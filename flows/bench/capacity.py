"""KV cache capacity from the engine's metrics, when it exports it: reported, never gated.

A release that leaves less memory for the KV cache (a larger graph pool, a new buffer) serves
fewer or shorter sequences at once, which no time per token shows. vLLM exports its cache
configuration as an info gauge whose value is 1 and whose labels carry the numbers, e.g.
`vllm:cache_config_info{block_size="16",num_gpu_blocks="661",...} 1` (vLLM's
`EXPECTED_METRICS_V1` lists it; `kv_cache_size_tokens` is a label of newer versions). Any
`*cache_config_info` series is read, so another engine can export the same.
"""

from __future__ import annotations

import re

_SERIES = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*cache_config_info)\{(?P<labels>[^}]*)\}")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value > 0 else None


def kv_capacity(exposition: str) -> dict[str, float]:
    """KV blocks, block size and capacity in tokens from the exposition (empty when absent).

    Capacity is `kv_cache_size_tokens` when the engine gives it, else blocks x block size.
    With several engines (data parallel) the first series is read.
    """
    for line in exposition.splitlines():
        found = _SERIES.match(line)
        if found is None:
            continue
        labels = dict(_LABEL.findall(found.group("labels")))
        blocks = _number(labels.get("num_gpu_blocks"))
        size = _number(labels.get("block_size"))
        tokens = _number(labels.get("kv_cache_size_tokens"))
        if tokens is None and blocks is not None and size is not None:
            tokens = blocks * size
        out = {"kv_blocks": blocks, "kv_block_size": size, "kv_capacity_tokens": tokens}
        return {key: value for key, value in out.items() if value is not None}
    return {}
