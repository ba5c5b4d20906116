"""The benchmark gate reads each engine's metrics under that engine's names.

A session point's cached share is checked against the engine's prefix-cache counters; the gate
once read them under the bundled engine's names on every cluster, so under vLLM a session point
reported usage's cached share only.
"""

from __future__ import annotations

from flows.gates.benchmark.runner import endpoint_of
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from tests.support.paths import ROOT


def test_the_recipe_cluster_reads_vllm_s_prefix_cache_counters_as_optional() -> None:
    endpoint = endpoint_of(load_model(ROOT / "config/examples/tp3-triangle.yaml", Cluster))
    assert endpoint.optional_names == {
        "prefix_cache_queries": "vllm:prefix_cache_queries_total",
        "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    }
    assert endpoint.metric_names is not None
    assert not set(endpoint.metric_names) & set(endpoint.optional_names)  # never required
    assert all(name.startswith("vllm:") for name in endpoint.metric_names.values())


def test_the_local_cluster_reads_the_bundled_engine_s_counters() -> None:
    endpoint = endpoint_of(load_model(ROOT / "config/local.yaml", Cluster))
    assert endpoint.optional_names == {
        "prefix_cache_queries": "sparkengine_prefix_cache_queries_total",
        "prefix_cache_hits": "sparkengine_prefix_cache_hits_total",
    }
