#!/opt/venv/bin/python
"""`vllm serve` in the recipe double's image: the recipe's argv and environment, the bundled engine.

The image's entry point is `vllm serve` (the recipe's serve_args start with the model path,
christopherowen/spark-ds41f experiments/2026-10-10-r6d-deterministic/r6d-tp3.json `serve_args`).
This script takes that argv and the recipe's environment, starts `python -m sparkengine serve`
with the documented options (docs/engine.md) and prints the engine's phases as the lines vLLM and
the recipe print, so sparkgate reads the double's boot with the vllm-recipe profile unchanged:

- `--node-rank`, `--nnodes`, `--master-addr`/`--master-port`, `--port`, `--host` (rank 0 only;
  `--headless` ranks serve no API), `--served-model-name` and `--max-num-seqs` map onto the
  engine's options; every other vLLM option is accepted and ignored. The engine exports its
  /metrics under vLLM's names (`--metric-names vllm`), which the vllm-recipe profile reads.
- The kernel cache is `TILELANG_CACHE_DIR` (the profile's kernel cache) and every other JIT
  compile goes to `TRITON_CACHE_DIR`; the container runs as root, so both are written by root.
- `SPARK3_DISPLAY_CARVEOUT_WEIGHTS=1` needs the display device: vLLM patch 0021
  (experiments/2026-10-08-lil-rebase/vllm/0021-worker-display-carveout-weights.patch,
  `display_carveout.relocate_streamed_weights`) opens `/dev/dri/card0` read-write on every rank
  and raises "SPARK3_DISPLAY_CARVEOUT_WEIGHTS=1 but the display carve-out cannot hold N MiB of
  weights (/dev/dri/card0: ERROR)"; vLLM's engine core then logs "EngineCore failed to start."
  N is the two 842.5 MiB tables of the recipe's model (r6d README table "Display carve-out")
  rounded up to the patch's 16 MiB granule: 848. The double opens the node as the patch does but
  makes no ioctl, so a bind-mounted plain file stands in for the GB10's DRM card.

Every printed line's text is quoted from a source (the prefix `(Worker_TP0 pid=N) INFO ...`
follows vLLM's logger format of the same lines); tests/unit/spec/test_vllm_profile.py holds the
quoted lines with their sources:
- "Model loading took G GiB and S seconds": vLLM model_runner.py;
- "rank R in world size W is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank R, EP rank
  R, EPLB rank N/A": vLLM parallel_state.py;
- "JIT kernel warmup finished in S s." and "Kernel JIT monitor activated; monitored JIT
  compilations during inference will use mode=warn.": vLLM kernel_warmup.py, jit_monitor.py;
- "TileLang JIT compilation during inference: NAME. This causes a latency spike; consider
  extending warmup to cover this shape/config.": vLLM jit_monitor.py;
- "Application startup complete.": uvicorn, on the API server;
- "RoCE collective on rank R saw nothing from rank P, HCA 0, for T s (timeout T s) at sequence
  S; the GPU was stopped there": the recipe's sparknet failure record, quoted in the release
  thread (r6n report, reference/forum/000_3c0b897c1f318ae4.txt);
- "EngineCore failed to start." / "EngineCore encountered a fatal error.": vLLM core.py.
The engine's own JSON lines are passed through as they are (no profile pattern matches them).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DRM_NODE = "/dev/dri/card0"
CARVEOUT_MIB = 848  # 842.5 MiB of embedding and head tables, in 16 MiB granules
FALLBACK_CACHE = "/cache/kkref/jit"


def parse(argv: list[str]) -> argparse.Namespace:
    """The vLLM options the double maps; the rest are accepted as the real CLI accepts them."""
    if argv and argv[0] == "serve":
        argv = argv[1:]
    parser = argparse.ArgumentParser(prog="vllm serve", add_help=False)
    parser.add_argument("model")
    parser.add_argument("--served-model-name", default="model")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, default=29500)
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--headless", action="store_true")
    known, _ = parser.parse_known_args(argv)
    return known


def engine_argv(options: argparse.Namespace, env: dict[str, str]) -> list[str]:
    """`python -m sparkengine serve` with the documented options this rank needs."""
    kernels = env.get("TILELANG_CACHE_DIR", f"{FALLBACK_CACHE}/tilelang")
    jit = env.get("TRITON_CACHE_DIR", f"{FALLBACK_CACHE}/triton")
    argv = [
        sys.executable, "-m", "sparkengine", "serve",
        "--rank", str(options.node_rank), "--nnodes", str(options.nnodes),
        "--head", f"{options.master_addr}:{options.master_port}",
        "--port", str(options.port), "--model", options.model,
        "--cache", f"kernels={kernels}", "--cache", f"jit={jit}",
        "--served-model-name", options.served_model_name,
    ]  # fmt: skip
    if options.node_rank == 0 and not options.headless:
        argv += ["--host", options.host]
    if options.max_num_seqs:
        argv += ["--max-seqs", str(options.max_num_seqs)]
    # vLLM's metric names (vllm-recipe profile `metrics`), as the Sparks' /metrics answers
    return [*argv, "--metric-names", "vllm"]


class Lines:
    """vLLM's logger format: `(PROCESS pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] text`."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def say(self, process: str, level: str, where: str, text: str) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S", time.gmtime())
        print(f"({process} pid={os.getpid()}) {level} {stamp} [{where}] {text}", flush=True)

    def worker(self, where: str, text: str, level: str = "INFO") -> None:
        self.say(f"Worker_TP{self.rank}", level, where, text)

    def core(self, where: str, text: str, level: str = "INFO") -> None:
        self.say("EngineCore", level, where, text)


def refuse_without_display_device(lines: Lines) -> bool:
    """Patch 0021's refusal: the carve-out is on and the DRM node cannot be opened."""
    if os.environ.get("SPARK3_DISPLAY_CARVEOUT_WEIGHTS", "0") != "1":
        return False
    try:
        os.close(os.open(DRM_NODE, os.O_RDWR | os.O_CLOEXEC))
    except OSError as error:
        lines.core(
            "core.py:1484",
            "RuntimeError: SPARK3_DISPLAY_CARVEOUT_WEIGHTS=1 but the display carve-out cannot "
            f"hold {CARVEOUT_MIB} MiB of weights ({DRM_NODE}: {error})",
            "ERROR",
        )
        lines.core("core.py:866", "EngineCore failed to start.", "ERROR")
        return True
    return False


def model_gib(model: str, nnodes: int) -> float:
    """This rank's share of the model's weights, as vLLM reports what it loaded."""
    total = sum(p.stat().st_size for p in Path(model).glob("*.safetensors"))
    return total / max(nnodes, 1) / 2**30


def translate(record: dict[str, Any], lines: Lines, options: argparse.Namespace) -> None:
    """One engine event as the line vLLM or the recipe prints at that point."""
    event, rank = record.get("event"), options.node_rank
    if event == "loaded":
        gib = model_gib(options.model, options.nnodes)
        seconds = float(record.get("seconds", 0.0))
        lines.worker(
            "model_runner.py:381", f"Model loading took {gib:.2f} GiB and {seconds:.6f} seconds"
        )
    elif event == "prepared":
        seconds = float(record.get("seconds", 0.0))
        lines.core("kernel_warmup.py:134", f"JIT kernel warmup finished in {seconds:.2f}s.")
        lines.worker(
            "jit_monitor.py:79",
            "Kernel JIT monitor activated; monitored JIT compilations during inference "
            "will use mode=warn.",
        )
    elif event == "rendezvous":
        lines.say(
            "Worker", "INFO", "parallel_state.py:1923",
            f"rank {rank} in world size {options.nnodes} is assigned as DP rank 0, PP rank 0, "
            f"PCP rank 0, TP rank {rank}, EP rank {rank}, EPLB rank N/A",
        )  # fmt: skip
    elif event == "ready":
        print(f"(APIServer pid={os.getpid()}) INFO:     Application startup complete.", flush=True)
    elif event == "compile_after_freeze":
        lines.core(
            "jit_monitor.py:135",
            f"TileLang JIT compilation during inference: {record.get('family')}. This causes a "
            "latency spike; consider extending warmup to cover this shape/config.",
            "WARNING",
        )
    elif event == "collective_failure":
        timeout = float(record.get("timeout_s", 10))
        lines.core(
            "core.py:1484",
            f"RoCE collective on rank {rank} saw nothing from rank {record.get('peer')}, HCA 0, "
            f"for {timeout:.3f} s (timeout {timeout:g} s) at sequence {record.get('seq')}; "
            "the GPU was stopped there",
            "ERROR",
        )
    elif event == "fatal":
        lines.core("core.py:866", f"{record.get('error')}: {record.get('message')}", "ERROR")
        lines.core("core.py:710", "EngineCore encountered a fatal error.", "ERROR")


def relay(child: subprocess.Popen[str], lines: Lines, options: argparse.Namespace) -> None:
    """Pass every engine line through and add the vLLM line its event stands for."""
    assert child.stdout is not None
    for raw in child.stdout:
        print(raw, end="", flush=True)
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict):
            translate(record, lines, options)


def main(argv: list[str]) -> int:
    options = parse(argv)
    lines = Lines(options.node_rank)
    if refuse_without_display_device(lines):
        return 1
    child = subprocess.Popen(
        engine_argv(options, dict(os.environ)), stdout=subprocess.PIPE, text=True, bufsize=1
    )
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda sig, _frame: child.send_signal(sig))
    relay(child, lines, options)
    return child.wait()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
