"""`python -m sparkengine.bench`: the engine's own speed figures at TP2 on this machine.

Boots a cluster with empty caches (cold preparation), boots it again (warm), then measures
single-stream decode, 8-stream aggregate decode and prefill at 1K and 4K tokens, for each MLP
kernel variant. Absolute numbers depend on the machine and on whatever else runs there; the
ratios (cold/warm, fused/reference, 8-stream/single) are what to compare.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sparkengine.launch import LocalCluster
from sparkengine.model import make_model


def complete(url: str, prompt: str | list[int], max_tokens: int) -> float:
    """Seconds of one temperature-0 completion of exactly `max_tokens` tokens."""
    body = {
        "model": "sparkengine",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    request = urllib.request.Request(  # noqa: S310 - the loopback URL of a cluster we started
        url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:  # noqa: S310
        json.load(response)
    return time.perf_counter() - started


def distinct_prompt(tag: int, tokens: int) -> list[int]:
    """Distinct token ids (no prefix-cache hits between measurements)."""
    return [0] + [5 + (tag * 31 + i * 7 + i // 90) % 95 for i in range(tokens - 1)]


def measure(url: str, decode_tokens: int) -> dict[str, float]:
    """Decode and prefill figures against a ready cluster."""
    complete(url, distinct_prompt(99, 32), 8)  # first-request effects out of the way
    short = complete(url, distinct_prompt(1, 32), 1)
    long = complete(url, distinct_prompt(2, 32), decode_tokens + 1)
    single = decode_tokens / max(long - short, 1e-9)
    with ThreadPoolExecutor(8) as pool:
        started = time.perf_counter()
        streams = [distinct_prompt(10 + i, 32) for i in range(8)]
        list(pool.map(lambda prompt: complete(url, prompt, decode_tokens), streams))
        aggregate = 8 * decode_tokens / (time.perf_counter() - started)
    figures = {"decode_tok_s_1": single, "decode_tok_s_8": aggregate}
    for n in (1024, 4096):
        figures[f"prefill_tok_s_{n // 1024}k"] = n / complete(url, distinct_prompt(20 + n, n), 1)
    return {k: round(v, 1) for k, v in figures.items()}


def _boot(model: Path, caches: Path, nnodes: int, variant: str) -> LocalCluster:
    cluster = LocalCluster(model, caches, nnodes, args=["--mlp-kernel", variant])
    cluster.wait_ready(timeout=600)
    return cluster


def _prepare_seconds(cluster: LocalCluster) -> float:
    return float(max(cluster.named(r, "prepared")[0]["seconds"] for r in range(cluster.nnodes)))


def run(nnodes: int, decode_tokens: int, workdir: Path) -> dict[str, Any]:
    """Every figure, as a dict."""
    model = make_model(workdir / "model")
    results: dict[str, Any] = {"nnodes": nnodes}
    for variant in ("reference", "fused"):
        caches = workdir / f"caches-{variant}"
        cold = _boot(model, caches, nnodes, variant)
        cold.stop()
        warm = _boot(model, caches, nnodes, variant)
        try:
            results[variant] = {
                "prepare_cold_s": _prepare_seconds(cold),
                "prepare_warm_s": _prepare_seconds(warm),
                **measure(warm.url, decode_tokens),
            }
        finally:
            warm.stop()
    return results


def _table(results: dict[str, Any]) -> str:
    ref, fused = results["reference"], results["fused"]
    rows = [f"{'figure':<18}{'reference':>12}{'fused':>12}"]
    rows += [f"{k:<18}{ref[k]:>12}{fused[k]:>12}" for k in ref]
    ratios = {
        "cold/warm prepare (reference)": ref["prepare_cold_s"] / ref["prepare_warm_s"],
        "cold/warm prepare (fused)": fused["prepare_cold_s"] / fused["prepare_warm_s"],
        "fused/reference single-stream": fused["decode_tok_s_1"] / ref["decode_tok_s_1"],
        "fused/reference 8-stream": fused["decode_tok_s_8"] / ref["decode_tok_s_8"],
        "8-stream/single (fused)": fused["decode_tok_s_8"] / fused["decode_tok_s_1"],
    }
    rows += [f"{name}: {value:.2f}x" for name, value in ratios.items()]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a table (or JSON)."""
    parser = argparse.ArgumentParser(prog="python -m sparkengine.bench")
    parser.add_argument("--nnodes", type=int, default=2)
    parser.add_argument("--decode-tokens", type=int, default=128)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sparkengine-bench-") as tmp:
        results = run(args.nnodes, args.decode_tokens, Path(tmp))
    sys.stdout.write((json.dumps(results) if args.json else _table(results)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
