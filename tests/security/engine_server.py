"""The real bundled engine for attack and fault tests: ranks on free loopback ports.

The model and a warm kernel cache are made once per test process; every cluster gets its own
copy of the cache, so tests never race on it.
"""

from __future__ import annotations

import functools
import http.client
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sparkengine.config import ModelConfig, shard_for
from sparkengine.kernels import families
from sparkengine.kernels.registry import Registry
from sparkengine.launch import LocalCluster
from sparkengine.model import CONFIG, make_model


@functools.cache
def _made() -> tuple[Path, Path]:
    """A tiny model and kernel caches with every TP1/TP2 configuration, once per process."""
    root = Path(tempfile.mkdtemp(prefix="engine-attacks-"))
    model = make_model(root / "model", seed=1234)
    config = ModelConfig.load(model / CONFIG)
    registry = Registry({"kernels": root / "warm" / "kernels", "jit": root / "warm" / "jit"})
    for nnodes in (1, 2):
        registry.declare(families.declare(config, shard_for(config, 0, nnodes), fused_mlp=False))
    registry.prepare()
    return model, root / "warm"


@contextmanager
def running_engine(tmp: Path, nnodes: int = 1, **kwargs: Any) -> Iterator[LocalCluster]:
    """Ranks of the engine (LocalCluster keyword arguments pass through); always stopped."""
    model, warm = _made()
    for rank in range(nnodes):
        for kind in ("kernels", "jit"):
            shutil.copytree(warm / kind, tmp / str(rank) / kind)
    cluster = LocalCluster(model, tmp, nnodes, **kwargs)
    try:
        yield cluster
    finally:
        cluster.stop()


def request(
    cluster: LocalCluster,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """One HTTP exchange with rank 0: status and decoded JSON (or text)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn = http.client.HTTPConnection("127.0.0.1", cluster.port, timeout=60)
    try:
        conn.request(method, path, data, {"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        text = response.read().decode()
    finally:
        conn.close()
    try:
        return response.status, json.loads(text)
    except ValueError:
        return response.status, text


def assert_serving(cluster: LocalCluster) -> float:
    """Rank 0 is alive and /health answers 200; the seconds it took."""
    assert cluster.procs[0].poll() is None, f"rank 0 exited: {cluster.log()}"
    started = time.perf_counter()
    status, _ = request(cluster, "GET", "/health")
    assert status == 200
    return time.perf_counter() - started


def completion(**fields: Any) -> dict[str, Any]:
    """A small valid completion body with `fields` on top."""
    return {"model": "sparkengine", "prompt": "Hello", "max_tokens": 4, **fields}
