"""Fixtures for the engine's release tests: a model, warm kernel caches, and real ranks.

`LocalCluster` starts `python -m sparkengine serve` processes on free loopback ports, reads
their JSON-lines events as they come, and always kills what it started.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sparkengine.config import ModelConfig, shard_for
from sparkengine.kernels import families
from sparkengine.kernels.registry import Registry
from sparkengine.launch import LocalCluster
from sparkengine.model import CONFIG, make_model


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model, made once per session."""
    return make_model(tmp_path_factory.mktemp("model") / "tiny", seed=1234)


@pytest.fixture(scope="session")
def warm_cache(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Kernel caches with every TP1/TP2 configuration (both MLP variants) compiled once.

    Layout: ROOT/kernels and ROOT/jit. Tests copy it per rank with `rank_caches`.
    """
    root = tmp_path_factory.mktemp("warm-cache")
    config = ModelConfig.load(model_dir / CONFIG)
    registry = Registry({"kernels": root / "kernels", "jit": root / "jit"})
    for nnodes in (1, 2):
        for fused in (False, True):
            shard = shard_for(config, 0, nnodes)
            registry.declare(families.declare(config, shard, fused_mlp=fused))
    registry.prepare()
    return root


def rank_caches(
    warm: Path | None, dest: Path, nnodes: int, empty: frozenset[tuple[int, str]] = frozenset()
) -> Path:
    """Per-rank cache directories under `dest`, copied from `warm`; empty when `warm` is None
    or for the (rank, kind) pairs listed in `empty`."""
    for rank in range(nnodes):
        for kind in ("kernels", "jit"):
            target = dest / str(rank) / kind
            if warm is not None and (rank, kind) not in empty:
                shutil.copytree(warm / kind, target)
            else:
                target.mkdir(parents=True)
    return dest


@pytest.fixture
def start_cluster(model_dir: Path, warm_cache: Path, tmp_path: Path) -> Iterator[Any]:
    """Factory: start a cluster with warm caches (unless `cold` or `empty`); stopped at the end."""
    started: list[LocalCluster] = []

    def start(
        nnodes: int = 2,
        *,
        cold: bool = False,
        empty: frozenset[tuple[int, str]] = frozenset(),
        model: Path | None = None,
        **kwargs: Any,
    ) -> LocalCluster:
        dest = tmp_path / f"c{len(started)}"
        root = rank_caches(None if cold else warm_cache, dest, nnodes, empty)
        cluster = LocalCluster(model or model_dir, root, nnodes, **kwargs)
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.stop()


@pytest.fixture(scope="module")
def shared_cluster(
    model_dir: Path, warm_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """One ready TP2 cluster per test module."""
    root = rank_caches(warm_cache, tmp_path_factory.mktemp("shared"), 2)
    cluster = LocalCluster(model_dir, root, 2)
    try:
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()
