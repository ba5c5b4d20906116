"""One rank's life: load -> prepare -> freeze -> rendezvous -> warm-up -> ready -> serve.

Each phase is announced as a JSON-lines event with its figures. Any failure is logged as a
named record (`fatal`, plus `peer_failure` or `collective_failure` where a peer is to blame)
and the process exits non-zero, so the head never hangs silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from sparkengine import events
from sparkengine.api import Api
from sparkengine.collectives import Group
from sparkengine.config import ModelConfig, shard_for
from sparkengine.connections import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_TIMEOUT,
    LINGER,
    Gate,
)
from sparkengine.engine import HeadEngine, fail, worker_loop
from sparkengine.errors import EngineError
from sparkengine.faults import Faults, spin
from sparkengine.forward import Forward
from sparkengine.kernels import families
from sparkengine.kernels.registry import Registry
from sparkengine.metrics import Metrics
from sparkengine.model import CONFIG, load_shard, manifest_digest
from sparkengine.prefix_cache import BlockPool
from sparkengine.requests import Limits
from sparkengine.scheduler import Scheduler
from sparkengine.startup import HeadListener, Progress, WorkerLink


@dataclass(frozen=True)
class ServeOptions:
    """Everything `serve` was told on the command line."""

    rank: int
    nnodes: int
    head_host: str
    head_port: int
    port: int
    host: str
    model: Path
    caches: dict[str, Path]
    mlp_kernel: str = "reference"
    collective_timeout: float = 10.0
    stall_timeout: float = 20.0
    join_timeout: float = 600.0
    api_key: str | None = None
    served_model_name: str = "sparkengine"
    metric_names: str = "sparkengine"  # or "vllm": the same values under vLLM's names
    kv_blocks: int = 4096
    step_tokens: int = 512
    max_seqs: int = 64
    max_body_bytes: int = 2 << 20
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    read_timeout: float = DEFAULT_READ_TIMEOUT
    limits: Limits = field(default_factory=Limits)
    boot_token: str | None = None  # shared by every rank of one boot; None: no authentication


def serve(opts: ServeOptions) -> int:
    """Run one rank until stopped; returns the exit status."""
    events.set_rank(opts.rank)
    started = time.perf_counter()
    events.emit("start", nnodes=opts.nnodes, mlp_kernel=opts.mlp_kernel, model=str(opts.model))
    signal.signal(signal.SIGTERM, _stop_now)  # rank 0 replaces this once it serves HTTP
    try:
        faults = Faults.from_env()
        progress = Progress()
        digest = manifest_digest(opts.model)
        listener = worker = None
        if opts.rank == 0:
            listener = HeadListener(
                opts.head_host,
                opts.head_port,
                opts.nnodes,
                progress,
                model_digest=digest,
                token=opts.boot_token,
            )
        else:
            hello = {"rank": opts.rank, "nnodes": opts.nnodes, "model_digest": digest}
            worker = WorkerLink(
                opts.head_host,
                opts.head_port,
                hello,
                progress,
                opts.join_timeout,
                token=opts.boot_token,
            )
        metrics = Metrics(
            opts.metric_names, opts.served_model_name, opts.kv_blocks, families.BLOCK_SIZE
        )
        forward = _load_and_prepare(opts, faults, progress, metrics)
        progress.set("rendezvous")
        faults.enter(opts.rank, "rendezvous")
        t0 = time.perf_counter()
        if listener is not None:
            group = listener.rendezvous(
                opts.stall_timeout, opts.join_timeout, opts.collective_timeout
            )
        else:
            assert worker is not None
            group = worker.rendezvous(opts.nnodes, opts.stall_timeout, opts.collective_timeout)
        events.emit("rendezvous", seconds=round(time.perf_counter() - t0, 3))
        forward.group = group
    except Exception as exc:  # noqa: BLE001 - every failure becomes a named record
        fail(exc)
        return 1
    if opts.rank != 0:
        try:
            worker_loop(forward, group, faults, time.perf_counter())
        except Exception as exc:  # noqa: BLE001
            fail(exc)
        return 0
    return _serve_head(opts, forward, group, faults=faults, metrics=metrics, started=started)


def _stop_now(signum: int, _frame: object) -> None:
    events.emit("stopping", reason=f"signal {signal.Signals(signum).name}")
    os._exit(0)


def _load_and_prepare(
    opts: ServeOptions, faults: Faults, progress: Progress, metrics: Metrics
) -> Forward:
    progress.set("load")
    faults.enter(opts.rank, "load")
    t0 = time.perf_counter()
    config = ModelConfig.load(opts.model / CONFIG)
    try:
        shard = shard_for(config, opts.rank, opts.nnodes)
    except ValueError as exc:
        raise EngineError(str(exc)) from exc
    weights = load_shard(opts.model, shard)
    events.emit("loaded", seconds=round(time.perf_counter() - t0, 3), digest=weights.digest)

    progress.set("prepare")
    faults.enter(opts.rank, "prepare")

    def late_compile(kernel: families.KernelConfig) -> None:
        events.emit("compile_after_freeze", family=kernel.family, key=kernel.key)
        metrics.compiles_after_freeze += 1

    registry = Registry(
        opts.caches,
        lazy_families=[faults.lazy_family] if faults.lazy_family else [],
        on_late_compile=late_compile,
    )
    fused = opts.mlp_kernel == "fused"
    registry.declare(families.declare(config, shard, fused_mlp=fused))
    delay = faults.prepare_delay_for(opts.rank)

    def step(done: int, total: int) -> None:
        progress.set("prepare", done, total)
        if delay and done < total:
            spin(delay / total)  # slow but live: progress keeps advancing

    stats = registry.prepare(step)
    events.emit(
        "prepared",
        kernels=stats.kernels,
        compiled=stats.compiled,
        cached=stats.cached,
        seconds=round(stats.seconds, 3),
    )
    registry.freeze()
    events.emit("frozen", kernels=stats.kernels)
    return Forward(
        weights, shard, registry, kv_blocks=opts.kv_blocks, fused_mlp=fused, faults=faults
    )


def _serve_head(
    opts: ServeOptions,
    forward: Forward,
    group: Group,
    *,
    faults: Faults,
    metrics: Metrics,
    started: float,
) -> int:
    config = forward.cfg
    pool = BlockPool(opts.kv_blocks, families.BLOCK_SIZE)
    scheduler = Scheduler(
        pool,
        max_context=config.max_context,
        step_tokens=opts.step_tokens,
        max_seqs=opts.max_seqs,
        failing_seed=faults.request_seed,
    )
    engine = HeadEngine(forward, scheduler, group, metrics)
    try:
        faults.enter(0, "warmup")
        events.emit("warmup", seconds=engine.warmup())
        faults.enter(0, "serve")
    except Exception as exc:  # noqa: BLE001
        fail(exc)
    api = Api(
        engine,
        metrics,
        model_name=opts.served_model_name,
        model_dir=str(opts.model),
        max_context=config.max_context,
        vocab=config.vocab,
        api_key=opts.api_key,
        limits=opts.limits,
        max_body=opts.max_body_bytes,
        read_timeout=opts.read_timeout,
    )
    engine.start()
    try:
        asyncio.run(_run_http(api, opts, engine, started))
    except OSError as exc:  # e.g. the HTTP port is taken: a named record, not a traceback
        fail(exc)
    return 0


async def _run_http(api: Api, opts: ServeOptions, engine: HeadEngine, started: float) -> None:
    # handler_cancellation: a client that leaves cancels its handler, which aborts its sequence
    # keepalive_timeout: an idle kept-alive connection holds a slot of the gate no longer than
    # a silent new one
    gate = Gate(opts.max_connections, opts.read_timeout)
    runner = web.AppRunner(
        api.app(gate.middleware),
        access_log=None,
        handle_signals=False,
        handler_cancellation=True,
        keepalive_timeout=opts.read_timeout,
        lingering_time=LINGER,
    )
    await runner.setup()
    assert runner.server is not None
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(
        gate.factory(runner.server), opts.host, opts.port, reuse_address=True
    )
    events.emit("ready", port=opts.port, seconds=round(time.perf_counter() - started, 3))
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    events.emit("stopping", reason="signal")
    with contextlib.suppress(OSError):
        engine.stop()
    listener.close()
    await runner.cleanup()
