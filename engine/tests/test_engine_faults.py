"""Fault switches: parsing, and that each one breaks what it should (batch variance is in
test_engine_determinism.py; crash, stall and prepare delay in test_engine_startup.py).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sparkengine.config import ModelConfig, shard_for
from sparkengine.errors import EngineError
from sparkengine.faults import Faults
from sparkengine.forward import Forward, StepBatch
from sparkengine.kernels import families as fam
from sparkengine.kernels.registry import Registry
from sparkengine.model import CONFIG, load_shard


def test_switches_parse_and_reject_malformed_values() -> None:
    faults = Faults.from_env(
        {
            "SPARKENGINE_FAULT_BATCH_VARIANT": "1",
            "SPARKENGINE_FAULT_SLOWDOWN": "0.05",
            "SPARKENGINE_FAULT_LAZY_KERNEL": "mlp",
            "SPARKENGINE_FAULT_CRASH": "1@rendezvous",
            "SPARKENGINE_FAULT_STALL": "2@prepare",
            "SPARKENGINE_FAULT_PREPARE_DELAY": "1:20",
        }
    )
    assert faults == Faults(True, 0.05, "mlp", (1, "rendezvous"), (2, "prepare"), (1, 20.0))
    assert Faults.from_env({}) == Faults()
    assert faults.prepare_delay_for(1) == 20.0
    assert faults.prepare_delay_for(0) == 0.0
    for name, value in [
        ("CRASH", "1"),
        ("STALL", "x@load"),
        ("CRASH", "1@nowhere"),
        ("LAZY_KERNEL", "nope"),
        ("PREPARE_DELAY", "1"),
        ("SLOWDOWN", "lots"),
    ]:
        with pytest.raises(EngineError, match=f"SPARKENGINE_FAULT_{name}"):
            Faults.from_env({f"SPARKENGINE_FAULT_{name}": value})


def test_slowdown_repeats_real_work_and_leaves_outputs_alone(
    model_dir: Path, warm_cache: Path
) -> None:
    shard = shard_for(ModelConfig.load(model_dir / CONFIG), 0, 1)
    weights = load_shard(model_dir, shard)
    registry = Registry({"kernels": warm_cache / "kernels", "jit": warm_cache / "jit"})
    registry.declare(fam.declare(weights.config, shard, fused_mlp=False))
    registry.prepare()
    registry.freeze()
    calls: list[str] = []
    original_get = registry.get

    def counting_get(config: fam.KernelConfig) -> Any:
        calls.append(config.family)
        return original_get(config)

    registry.get = counting_get  # type: ignore[method-assign]
    batch = StepBatch(
        np.array([0, 40, 41], np.int32),
        np.arange(3, dtype=np.int32),
        np.array([0], np.int32),
        np.zeros(3, np.int32),
        np.array([2], np.int32),
    )
    outputs = {}
    for slowdown in (0.0, 0.5):
        forward = Forward(
            weights, shard, registry, kv_blocks=2, fused_mlp=False, faults=Faults(slowdown=slowdown)
        )
        calls.clear()
        outputs[slowdown] = forward.run(batch)
        outputs[f"mlp-{slowdown}"] = calls.count("mlp")
    assert outputs["mlp-0.5"] > outputs["mlp-0.0"] == weights.config.layers
    assert np.array_equal(outputs[0.0], outputs[0.5])


@pytest.mark.integration
def test_lazy_kernel_is_reported_as_compile_after_freeze(start_cluster: Any) -> None:
    cluster = start_cluster(env={"SPARKENGINE_FAULT_LAZY_KERNEL": "residual"})
    cluster.wait_ready()
    prepared = cluster.named(0, "prepared")[0]
    assert prepared["kernels"] == 9  # one family left out of preparation
    late = cluster.named(0, "compile_after_freeze")
    assert late
    assert late[0]["family"] == "residual"
    assert cluster.named(1, "compile_after_freeze")
    metrics = urllib.request.urlopen(cluster.url + "/metrics", timeout=10).read().decode()
    assert "sparkengine_compiles_after_freeze_total 1" in metrics


@pytest.mark.integration
def test_rank_stalled_while_serving_fails_a_collective_by_name(start_cluster: Any) -> None:
    cluster = start_cluster(
        env={"SPARKENGINE_FAULT_STALL": "1@serve"}, args=["--collective-timeout", "2"]
    )
    cluster.wait_ready()
    body = {"model": "sparkengine", "prompt": "hi", "max_tokens": 4}
    request = urllib.request.Request(
        cluster.url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "json"}
    )
    with pytest.raises(OSError):
        urllib.request.urlopen(request, timeout=30)
    assert cluster.wait_exit(0, timeout=30) != 0
    failure = cluster.wait_event(0, "collective_failure")
    assert failure["peer"] == 1
    assert failure["phase"] == "serve"
    assert failure["timeout_s"] == 2


@pytest.mark.integration
def test_rank_crashing_while_idle_is_named_by_the_head(start_cluster: Any) -> None:
    cluster = start_cluster(env={"SPARKENGINE_FAULT_CRASH": "1@serve"})
    cluster.wait_ready()
    assert cluster.wait_exit(1, timeout=30) == 70
    assert cluster.wait_exit(0, timeout=30) != 0  # noticed by its idle pings, no traffic needed
    assert cluster.wait_event(0, "peer_failure")["peer"] == 1
