"""Command line: `python -m sparkengine make-model ...` and `python -m sparkengine serve ...`.

Thread counts are pinned to one before numba or numpy start, so each rank computes on one core,
deterministically.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import sparkengine.one_thread  # noqa: F401 - before numba or numpy load

DEFAULT_CACHE_ROOT = Path.home() / ".cache" / "sparkengine"


def _head(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host, int(port)


def _cache(value: str) -> tuple[str, Path]:
    kind, sep, path = value.partition("=")
    if not sep or kind not in ("kernels", "jit") or not path:
        raise argparse.ArgumentTypeError(f"expected kernels=PATH or jit=PATH, got {value!r}")
    return kind, Path(path)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (public so the docs and tests can read its help)."""
    parser = argparse.ArgumentParser(prog="python -m sparkengine")
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("make-model", help="write a seeded model directory")
    make.add_argument("--out", type=Path, required=True)
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--size", choices=("tiny", "small"), default="tiny")
    make.add_argument("--max-context", type=int, default=8192)

    serve = sub.add_parser("serve", help="run one rank")
    serve.add_argument("--rank", type=int, required=True)
    serve.add_argument("--nnodes", type=int, required=True)
    serve.add_argument("--head", type=_head, required=True, help="rank 0's HOST:PORT for ranks")
    serve.add_argument("--port", type=int, required=True, help="HTTP port (rank 0)")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (rank 0)")
    serve.add_argument("--model", type=Path, required=True)
    serve.add_argument("--cache", type=_cache, action="append", default=[])
    serve.add_argument("--mlp-kernel", choices=("reference", "fused"), default="reference")
    serve.add_argument("--collective-timeout", type=float, default=10.0)
    serve.add_argument("--stall-timeout", type=float, default=20.0)
    serve.add_argument("--join-timeout", type=float, default=600.0)
    serve.add_argument("--api-key", default=os.environ.get("SPARKENGINE_API_KEY"))
    serve.add_argument("--served-model-name", default="sparkengine")
    serve.add_argument(
        "--metric-names",
        choices=("sparkengine", "vllm"),
        default="sparkengine",
        help="export /metrics under this engine's names or vLLM's (for a vLLM harness)",
    )
    serve.add_argument("--kv-blocks", type=int, default=4096)
    serve.add_argument("--step-tokens", type=int, default=512)
    serve.add_argument("--max-seqs", type=int, default=64)
    serve.add_argument(
        "--max-body-bytes", type=int, default=2 << 20, help="larger request bodies get 413"
    )
    serve.add_argument(
        "--max-connections",
        type=int,
        default=256,
        help="open HTTP connections; one more is answered 503 and closed",
    )
    serve.add_argument(
        "--read-timeout",
        type=float,
        default=30.0,
        help="seconds for a request's head, and again for its body, to arrive (else closed/408)",
    )
    serve.add_argument("--max-stop", type=int, default=16, help="stop strings per request")
    serve.add_argument("--max-stop-chars", type=int, default=256, help="length of a stop string")
    serve.add_argument(
        "--cpus",
        type=_cpu_list,
        default=None,
        help="pin this rank to these CPUs, e.g. 0 or 2-3,6 (default SPARKENGINE_CPUS; unset: all)",
    )
    return parser


def _cpu_list(value: str) -> set[int]:
    """A Linux CPU list (`0`, `2-3,6`) as a set; empty for no pinning."""
    cpus: set[int] = set()
    for part in filter(None, (p.strip() for p in value.split(","))):
        first, sep, last = part.partition("-")
        if not first.isdigit() or (sep and not last.isdigit()):
            raise argparse.ArgumentTypeError(f"expected a CPU list like 0 or 2-3,6, got {value!r}")
        cpus.update(range(int(first), int(last if sep else first) + 1))
    return cpus


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "make-model":
        from sparkengine.model import make_model  # noqa: PLC0415 - keep `serve` startup lean

        make_model(args.out, seed=args.seed, size=args.size, max_context=args.max_context)
        return 0
    from sparkengine.requests import Limits  # noqa: PLC0415
    from sparkengine.serve import ServeOptions, serve  # noqa: PLC0415
    from sparkengine.startup import BOOT_TOKEN_ENV  # noqa: PLC0415

    cpus = args.cpus
    if cpus is None:
        try:
            cpus = _cpu_list(os.environ.get("SPARKENGINE_CPUS", ""))
        except argparse.ArgumentTypeError as error:
            parser.error(f"SPARKENGINE_CPUS: {error}")
    if cpus:  # one rank per core keeps a step's timing free of its peer's scheduling
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as error:
            parser.error(f"--cpus {sorted(cpus)}: {error.strerror} (CPUs here: {os.cpu_count()})")
    caches = {"kernels": DEFAULT_CACHE_ROOT / "kernels", "jit": DEFAULT_CACHE_ROOT / "jit"}
    caches.update(dict(args.cache))
    host, port = args.head
    return serve(
        ServeOptions(
            rank=args.rank,
            nnodes=args.nnodes,
            head_host=host,
            head_port=port,
            port=args.port,
            host=args.host,
            model=args.model,
            caches=caches,
            mlp_kernel=args.mlp_kernel,
            collective_timeout=args.collective_timeout,
            stall_timeout=args.stall_timeout,
            join_timeout=args.join_timeout,
            api_key=args.api_key,
            served_model_name=args.served_model_name,
            metric_names=args.metric_names,
            kv_blocks=args.kv_blocks,
            step_tokens=args.step_tokens,
            max_seqs=args.max_seqs,
            max_body_bytes=args.max_body_bytes,
            max_connections=args.max_connections,
            read_timeout=args.read_timeout,
            limits=Limits(max_stop=args.max_stop, max_stop_chars=args.max_stop_chars),
            boot_token=os.environ.get(BOOT_TOKEN_ENV) or None,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
