"""Fixtures for the engine's release tests: a model, warm kernel caches, and real ranks.

`EngineCluster` starts `python -m sparkengine serve` processes on free loopback ports, reads
their JSON-lines events as they come, and always kills what it started.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sparkengine.config import ModelConfig, shard_for
from sparkengine.kernels import families
from sparkengine.kernels.registry import Registry
from sparkengine.model import CONFIG, make_model


def free_port() -> int:
    """A port that was free a moment ago on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EngineCluster:
    """N ranks of the engine on loopback."""

    def __init__(
        self,
        model: Path,
        cache_root: Path,
        nnodes: int = 2,
        *,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        rank_env: dict[int, dict[str, str]] | None = None,
    ) -> None:
        self.nnodes = nnodes
        self.port = free_port()
        self.head_port = free_port()
        self.events: dict[int, list[dict[str, Any]]] = {r: [] for r in range(nnodes)}
        self.procs: dict[int, subprocess.Popen[str]] = {}
        self._lock = threading.Lock()
        for rank in range(nnodes):
            argv = [
                sys.executable, "-m", "sparkengine", "serve",
                "--rank", str(rank), "--nnodes", str(nnodes),
                "--head", f"127.0.0.1:{self.head_port}", "--port", str(self.port),
                "--model", str(model),
                "--cache", f"kernels={cache_root / str(rank) / 'kernels'}",
                "--cache", f"jit={cache_root / str(rank) / 'jit'}",
                *(args or []),
            ]  # fmt: skip
            full_env = {**os.environ, **(env or {}), **(rank_env or {}).get(rank, {})}
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env
            )
            self.procs[rank] = proc
            threading.Thread(target=self._read, args=(rank, proc), daemon=True).start()

    @property
    def url(self) -> str:
        """Base URL of rank 0's HTTP API."""
        return f"http://127.0.0.1:{self.port}"

    def _read(self, rank: int, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "_text", "line": line.rstrip()}
            with self._lock:
                self.events[rank].append(event)

    def named(self, rank: int, name: str) -> list[dict[str, Any]]:
        """Events called `name` from `rank` so far."""
        with self._lock:
            return [e for e in self.events[rank] if e.get("event") == name]

    def wait_event(self, rank: int, name: str, timeout: float = 120.0) -> dict[str, Any]:
        """Wait for the first `name` event of `rank`; fail with the log if it never comes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.named(rank, name)
            if found:
                return found[0]
            if self.procs[rank].poll() is not None and not self.named(rank, name):
                time.sleep(0.2)  # let the reader drain
                if not self.named(rank, name):
                    break
            time.sleep(0.05)
        raise AssertionError(f"rank {rank}: no {name!r} event; log: {self.log()}")

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Wait for rank 0's `ready`."""
        self.wait_event(0, "ready", timeout)

    def wait_exit(self, rank: int, timeout: float = 60.0) -> int:
        """Wait for a rank to exit; its status."""
        return self.procs[rank].wait(timeout)

    def log(self) -> str:
        """Every event so far (for failure messages)."""
        with self._lock:
            return json.dumps(self.events, indent=None)[-6000:]

    def stop(self) -> None:
        """Terminate every rank (rank 0 first, so workers get STOP), then kill stragglers."""
        for rank in sorted(self.procs):
            if self.procs[rank].poll() is None:
                self.procs[rank].terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


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
    started: list[EngineCluster] = []

    def start(
        nnodes: int = 2,
        *,
        cold: bool = False,
        empty: frozenset[tuple[int, str]] = frozenset(),
        model: Path | None = None,
        **kwargs: Any,
    ) -> EngineCluster:
        dest = tmp_path / f"c{len(started)}"
        root = rank_caches(None if cold else warm_cache, dest, nnodes, empty)
        cluster = EngineCluster(model or model_dir, root, nnodes, **kwargs)
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.stop()


@pytest.fixture(scope="module")
def shared_cluster(
    model_dir: Path, warm_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EngineCluster]:
    """One ready TP2 cluster per test module."""
    root = rank_caches(warm_cache, tmp_path_factory.mktemp("shared"), 2)
    cluster = EngineCluster(model_dir, root, 2)
    try:
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()
