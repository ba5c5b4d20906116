"""Determinism scenarios: temperature-0 tokens and logprobs bit-identical alone, all at once,
staggered, beside a long prefill, from the prefix cache, with the fused MLP and after a restart;
and different under SPARKENGINE_FAULT_BATCH_VARIANT=1.
"""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytestmark = pytest.mark.integration

PROMPTS = [
    f"Prompt {i}: " + "the quick brown fox jumps over the lazy dog "[i:] * 2 for i in range(8)
]
LONG = "A long document that is prefilled in chunks beside the others. " * 60


def complete(url: str, prompt: str, max_tokens: int = 24) -> tuple[list[int], list[float]]:
    body = {
        "model": "sparkengine",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "logprobs": 1,
        "return_token_ids": True,
    }
    request = urllib.request.Request(
        url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        choice = json.load(response)["choices"][0]
    return choice["token_ids"], choice["logprobs"]["token_logprobs"]


def alone(url: str) -> list[Any]:
    return [complete(url, p) for p in PROMPTS]


def together(url: str, stagger: float = 0.0, long_prompt: bool = False) -> list[Any]:
    with ThreadPoolExecutor(len(PROMPTS) + 1) as pool:
        if long_prompt:
            long_future = pool.submit(complete, url, LONG, 8)
            time.sleep(0.05)
        futures = []
        for prompt in PROMPTS:
            futures.append(pool.submit(complete, url, prompt))
            if stagger:
                time.sleep(stagger)
        results = [f.result() for f in futures]
        if long_prompt:
            long_future.result()
    return results


@pytest.mark.slow
def test_outputs_are_identical_in_every_scenario(shared_cluster: Any) -> None:
    url = shared_cluster.url
    baseline = alone(url)
    assert all(len(tokens) == 24 for tokens, _ in baseline)
    assert len({tuple(t) for t, _ in baseline}) > 1  # distinct prompts, distinct outputs
    assert together(url) == baseline
    assert together(url, stagger=0.02) == baseline
    assert together(url, long_prompt=True) == baseline
    assert alone(url) == baseline  # again, after traffic: prompts now hit the prefix cache
    metrics = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    hits = next(
        float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith("sparkengine_prefix_cache_hits_total")
    )
    assert hits > 0
    assert "sparkengine_compiles_after_freeze_total 0" in metrics


@pytest.mark.slow
def test_fused_mlp_and_a_restart_give_the_same_bits(
    shared_cluster: Any, start_cluster: Any
) -> None:
    baseline = alone(shared_cluster.url)
    fused = start_cluster(args=["--mlp-kernel", "fused"])
    fused.wait_ready()
    assert alone(fused.url) == baseline
    assert together(fused.url) == baseline
    fused.stop()
    restarted = start_cluster()
    restarted.wait_ready()
    assert alone(restarted.url) == baseline


def test_batch_variant_fault_breaks_determinism(start_cluster: Any) -> None:
    cluster = start_cluster(env={"SPARKENGINE_FAULT_BATCH_VARIANT": "1"})
    cluster.wait_ready()
    assert together(cluster.url) != alone(cluster.url)
