"""`python -m sparkengine.steadiness`: is the noise in CPU per step the boot's or the machine's?

The benchmark gate compares boots. If a boot started in a lucky or unlucky state (memory layout,
placement), arm means would differ between boots while staying level within each; if the machine
itself speeds up and slows down (other tenants of a shared host), a boot's level moves while it
runs, and boots differ only as much as the moments they ran at. This tells them apart:

- two probes in the controller's own thread CPU time, chunk after chunk: arithmetic on
  cache-resident matrices, and sums over a 64 MiB array (memory bandwidth);
- `--boots` boots of a TP2 cluster, each serving back-to-back 4-stream decode samples for
  `--seconds`, rank 0's CPU per step (`sparkengine_step_cpu_seconds`) averaged in 5 s blocks.

It prints the scatter of a probe chunk and of 5-chunk groups, and for the engine the SD of a block
within its boot against the SD of boot means between boots. `--pin` pins rank r to CPU r and
`--env KEY=VALUE` sets a variable for every rank, to try a remedy against the same yardstick.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import sparkengine.one_thread  # noqa: F401 - one BLAS thread, before numpy loads

# isort: split
import numpy as np

from sparkengine.bench import complete, distinct_prompt
from sparkengine.launch import LocalCluster
from sparkengine.model import make_model

BLOCK_S = 5.0
STREAMS = 4
DECODE_TOKENS = 128


def relative_sd(values: Sequence[float]) -> float:
    """Sample SD as a percentage of the mean (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    return 100.0 * statistics.stdev(values) / statistics.mean(values)


def block_means(samples: Sequence[tuple[float, float]], width: float) -> list[float]:
    """Means of (seconds since start, value) samples in consecutive blocks of `width` seconds."""
    blocks: dict[int, list[float]] = {}
    for at, value in samples:
        blocks.setdefault(int(at // width), []).append(value)
    return [statistics.mean(blocks[index]) for index in sorted(blocks)]


def group_means(values: Sequence[float], size: int) -> list[float]:
    """Means of consecutive whole groups of `size` values."""
    whole = len(values) - len(values) % size
    return [statistics.mean(values[i : i + size]) for i in range(0, whole, size)]


@dataclass(frozen=True)
class Spread:
    """How one measured quantity scatters at two time scales."""

    name: str
    mean: float
    unit: str
    short_sd: float | None  # a chunk (probes), a 5 s block within its boot (engine; None: 1), %
    long_sd: float  # 5-chunk groups (probes) or boot means between boots (engine), %
    count: int


def probe_spread(name: str, work: Callable[[], None], seconds: float) -> Spread:
    """Thread CPU milliseconds of `work`, chunk after chunk, for `seconds`."""
    work()
    chunks: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or len(chunks) < 10:
        started = time.thread_time()
        work()
        chunks.append(1000.0 * (time.thread_time() - started))
    return Spread(
        name, statistics.mean(chunks), "ms", relative_sd(chunks),
        relative_sd(group_means(chunks, 5)), len(chunks),
    )  # fmt: skip


def _compute_work() -> Callable[[], None]:
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((128, 384)).astype(np.float32)
    weights = rng.standard_normal((384, 384)).astype(np.float32)  # tanh saturates: no subnormals

    def work() -> None:
        x = rows
        for _ in range(200):
            x = np.tanh(x @ weights)

    return work


def _memory_work() -> Callable[[], None]:
    big = np.ones(16 << 20, np.float32)

    def work() -> None:
        for _ in range(20):
            big.sum()

    return work


def _step_cpu(url: str) -> tuple[float, float]:
    """Rank 0's summed step CPU seconds and step count from /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:  # noqa: S310
        text = response.read().decode()
    figures = dict(line.split(" ", 1) for line in text.splitlines() if line and line[0] != "#")
    return (
        float(figures["sparkengine_step_cpu_seconds_sum"]),
        float(figures["sparkengine_step_seconds_count"]),
    )


def _decode_sample(url: str, tag: int) -> float:
    """CPU milliseconds per step of STREAMS concurrent decodes (distinct prompts)."""

    def one(stream: int) -> None:
        complete(url, distinct_prompt(tag * STREAMS + stream, 32), DECODE_TOKENS)

    cpu_before, steps_before = _step_cpu(url)
    with ThreadPoolExecutor(STREAMS) as pool:
        list(pool.map(one, range(STREAMS)))
    cpu_after, steps_after = _step_cpu(url)
    return 1000.0 * (cpu_after - cpu_before) / max(steps_after - steps_before, 1.0)


def engine_spread(
    workdir: Path, *, boots: int, seconds: float, env: dict[str, str], pin: bool,
    say: Callable[[str], None],
) -> Spread:  # fmt: skip
    """Boot a TP2 cluster `boots` times; rank 0's CPU per step in blocks within each boot."""
    model = make_model(workdir / "model")
    caches = workdir / "caches"
    rank_env = {rank: {"SPARKENGINE_CPUS": str(rank)} for rank in range(2)} if pin else {}
    per_boot: list[list[float]] = []
    for boot in range(-1, boots):  # boot -1 fills the kernel caches and is not measured
        cluster = LocalCluster(model, caches, 2, env=env, rank_env=rank_env)
        try:
            cluster.wait_ready(timeout=900)
            if boot < 0:
                continue
            _decode_sample(cluster.url, tag=0)  # first-request effects out of the way
            samples: list[tuple[float, float]] = []
            started, tag = time.monotonic(), 1
            while time.monotonic() - started < seconds or not samples:
                at = time.monotonic() - started
                samples.append((at, _decode_sample(cluster.url, tag)))
                tag += 1
        finally:
            cluster.stop()
        blocks = block_means(samples, BLOCK_S)
        per_boot.append(blocks)
        say(f"boot {boot + 1}: " + " ".join(f"{value:.3f}" for value in blocks))
    within = [relative_sd(blocks) for blocks in per_boot if len(blocks) > 1]
    means = [statistics.mean(blocks) for blocks in per_boot]
    return Spread(
        "engine", statistics.mean(means), "ms/step", statistics.mean(within) if within else None,
        relative_sd(means), len(per_boot),
    )  # fmt: skip


def _table(spreads: Sequence[Spread]) -> str:
    rows = [
        f"{'measure':<10}{'mean':>12} {'unit':<8}{'short SD %':>11}{'long SD %':>11}{'n':>6}",
    ]
    rows += [
        f"{s.name:<10}{s.mean:>12.3f} {s.unit:<8}{_pct(s.short_sd):>11}{_pct(s.long_sd):>11}"
        f"{s.count:>6}"
        for s in spreads
    ]
    rows.append(
        "short: a probe chunk, or a 5 s block within its boot; long: 5-chunk groups, or boot "
        "means between boots"
    )
    return "\n".join(rows)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _env_pair(value: str) -> tuple[str, str]:
    key, sep, setting = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {value!r}")
    return key, setting


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table (or JSON)."""
    parser = argparse.ArgumentParser(prog="python -m sparkengine.steadiness")
    parser.add_argument("--boots", type=int, default=6, help="engine boots (default 6)")
    parser.add_argument("--seconds", type=float, default=40.0, help="decode time per boot")
    parser.add_argument("--probe-seconds", type=float, default=40.0, help="time per probe")
    parser.add_argument("--pin", action="store_true", help="pin rank r to CPU r")
    parser.add_argument("--env", type=_env_pair, action="append", default=[], help="KEY=VALUE")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        if not args.json:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    spreads = [
        probe_spread("compute", _compute_work(), args.probe_seconds),
        probe_spread("memory", _memory_work(), args.probe_seconds),
    ]
    with tempfile.TemporaryDirectory(prefix="sparkengine-steadiness-") as tmp:
        spreads.append(
            engine_spread(
                Path(tmp),
                boots=args.boots,
                seconds=args.seconds,
                env=dict(args.env),
                pin=args.pin,
                say=say,
            )
        )
    if args.json:
        sys.stdout.write(json.dumps([s.__dict__ for s in spreads]) + "\n")
    else:
        say(_table(spreads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
