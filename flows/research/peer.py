"""The guidellm peer check: guidellm and our generator, same engine boot, same load.

`python -m flows.research.peer --out DIR` boots the bundled engine (TP2 on loopback),
warms it, then for each load (one stream; four concurrent streams) runs our generator, guidellm,
and our generator again (so our own repeat shows the session's noise floor), all on distinct
prompts of the same exact length and the same max_tokens. It writes every raw report and prints
the comparison (flows/research/peer_metrics.py); docs/peer-check.md explains the gaps.

guidellm drags in torch, transformers and datasets, so it lives in its own virtualenv under
.sparkgate/peer-venv (`--setup` creates it) and runs as a subprocess: the project's own
environment never imports it. No model hub is reachable, so guidellm gets a local JSON-lines
dataset with the token counts stated per row and takes its counts from the server's usage;
the engine's tokenizer is one token per character plus BOS, so a text of n - 1 characters is
exactly n prompt tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from flows.bench.client import Recorder, RequestSpec, open_session, send
from flows.bench.prompts import passage
from flows.bench.report import Receipt
from flows.engine_api.endpoint import Endpoint
from flows.errors import BenchError
from flows.research.peer_metrics import (
    EngineWindow,
    Row,
    Windows,
    cached_total,
    compare,
    markdown_table,
    parse_guidellm,
    receipt_timings,
)
from flows.settings import state_dir
from flows.ui.console import err_console, out_console

GUIDELLM_VERSION = "0.8.1"
TORCH_VERSION = "2.13.0"
MODEL = "sparkengine"
ROUTE = "request_format=/v1/completions"


class PeerConfig(BaseModel):
    """The load of the check: prompt and output lengths, request counts per load."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt_tokens: int = Field(default=128, ge=2)
    max_tokens: int = Field(default=64, ge=2)
    loads: dict[int, int] = Field(default={1: 8, 4: 16}, description="streams -> requests per run")
    warmup_requests: int = Field(default=4, ge=0)
    seed: int = 0
    guidellm_timeout_s: float = 900.0


def peer_venv() -> Path:
    """Where the separate guidellm virtualenv lives (git-ignored state)."""
    return state_dir() / "peer-venv"


def setup_commands(venv: Path) -> list[list[str]]:
    """The commands that create the peer venv: torch (CPU build) first, then guidellm."""
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    return [
        [sys.executable, "-m", "venv", str(venv)],
        [*pip, f"torch=={TORCH_VERSION}"],
        [*pip, f"guidellm=={GUIDELLM_VERSION}"],
    ]


def prompt_texts(tag: str, count: int, tokens: int, seed: int) -> list[str]:
    """`count` distinct prompts of exactly `tokens` engine tokens (BOS + one per character).

    Each starts with a hash of its tag and index, so no two share even one prefix-cache block;
    the body is real source text with anything outside printable ASCII, tab and newline
    replaced, so one character is one token.
    """
    out = []
    for i in range(count):
        head = hashlib.sha256(f"{seed}:{tag}:{i}".encode()).hexdigest()[:16] + "\n"
        body = passage(f"peer/{tag}/{i}", seed, tokens)
        text = "".join(c if c in "\t\n" or " " <= c <= "~" else "?" for c in head + body)
        out.append(text[: tokens - 1])
    return out


def guidellm_dataset(texts: Sequence[str], max_tokens: int) -> str:
    """A JSON-lines dataset guidellm reads offline: prompt, its token count, output tokens."""
    rows = [
        {"prompt": t, "prompt_tokens_count": len(t) + 1, "output_tokens_count": max_tokens}
        for t in texts
    ]
    return "".join(json.dumps(row) + "\n" for row in rows)


def guidellm_argv(
    venv: Path, url: str, *, data: Path, streams: int, requests: int, out: Path
) -> list[str]:
    """guidellm's command line for one load: closed loop of `streams`, `requests` in all."""
    profile = "kind=synchronous" if streams == 1 else f"kind=concurrent,streams={streams}"
    return [
        str(venv / "bin" / "guidellm"), "run",
        "--backend", f"kind=openai_http,target={url},model={MODEL},{ROUTE}",
        "--data", f"kind=json_file,path={data}",
        "--profile", profile,
        "--constraint", f"kind=max_requests,count={requests}",
        "--output", f"kind=json,path={out}",
        "--disable-console-interactive",
    ]  # fmt: skip


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def engine(workdir: Path, nnodes: int = 2, timeout_s: float = 600.0) -> Iterator[str]:
    """Boot the bundled engine (TP `nnodes` on loopback) and yield its URL; always stop it.

    Raises:
        BenchError: when it is not healthy within `timeout_s` (its logs are in `workdir`).
    """
    model = workdir / "model"
    if not (model / "config.json").exists():
        subprocess.run(
            [sys.executable, "-m", "sparkengine", "make-model", "--out", str(model)],
            check=True, capture_output=True,
        )  # fmt: skip
    port, head = _free_port(), _free_port()
    procs = []
    try:
        for rank in range(nnodes):
            argv = [
                sys.executable, "-m", "sparkengine", "serve", "--rank", str(rank),
                "--nnodes", str(nnodes), "--head", f"127.0.0.1:{head}", "--port", str(port),
                "--model", str(model),
                "--cache", f"kernels={workdir / f'rank{rank}' / 'kernels'}",
                "--cache", f"jit={workdir / f'rank{rank}' / 'jit'}",
            ]  # fmt: skip
            log = (workdir / f"rank{rank}.log").open("w")
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, procs, timeout_s, workdir)
        yield url
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_healthy(
    url: str, procs: list[subprocess.Popen[bytes]], timeout_s: float, logs: Path
) -> None:
    endpoint = Endpoint(url, timeout_s=2.0)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            raise BenchError(f"an engine rank exited during boot; see {logs}/rank*.log")
        try:
            endpoint.models()
            return
        except BenchError:
            time.sleep(0.5)
    raise BenchError(f"engine not ready after {timeout_s:g}s; see {logs}/rank*.log")


def _spec(text: str, max_tokens: int) -> RequestSpec:
    """The body guidellm sends for a row, so both tools ask the engine the same thing."""
    body = {"model": MODEL, "prompt": text, "max_tokens": max_tokens, "ignore_eos": True}
    return RequestSpec(body=body, token_ids=False)


async def _closed_loop(
    url: str, texts: Sequence[str], streams: int, max_tokens: int
) -> list[Receipt]:
    """`streams` workers, each sending its next request when its last one ended."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for text in texts:
        queue.put_nowait(text)
    recorder = Recorder()
    t0 = recorder.clock()
    receipts: list[Receipt] = []
    async with open_session(600.0) as session:

        async def worker() -> None:
            while not queue.empty():
                text = queue.get_nowait()
                receipts.append(
                    await send(session, url, _spec(text, max_tokens), t0=t0, recorder=recorder)
                )

        await asyncio.gather(*(worker() for _ in range(streams)))
    return receipts


def run_ours(url: str, texts: Sequence[str], streams: int, max_tokens: int) -> list[Receipt]:
    """Our generator at the given load (a closed loop of `streams`)."""
    return asyncio.run(_closed_loop(url, texts, streams, max_tokens))


def run_guidellm(argv: list[str], log: Path, timeout_s: float) -> None:
    """Run guidellm offline (no hub), its console output into `log`.

    Raises:
        BenchError: when it fails or times out, pointing at the log.
    """
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    with log.open("w") as out:
        try:
            done = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired as error:
            raise BenchError(f"guidellm ran over {timeout_s:g}s; see {log}") from error
    if done.returncode != 0:
        raise BenchError(f"guidellm exited {done.returncode}; see {log}")


T = TypeVar("T")
STEP_METRICS = {
    "running": "sparkengine_requests_running",
    "waiting": "sparkengine_requests_waiting",
    "step_count": "sparkengine_step_seconds_count",
    "step_sum": "sparkengine_step_seconds_sum",
}


class LoadResult(BaseModel):
    """Raw results of one load: our two runs' receipts, guidellm's report file, and the
    engine's step counters over each of the three runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    streams: int
    ours_first: list[Receipt]
    ours_second: list[Receipt]
    guidellm_report: str
    windows: Windows


def _windowed(endpoint: Endpoint, action: Callable[[], T]) -> tuple[T, EngineWindow]:
    """Run `action` on an idle engine and return the engine's step window over it."""
    before = endpoint.wait_idle(60.0)
    result = action()
    after = endpoint.wait_idle(60.0)
    return result, EngineWindow.between(before, after)


def run_load(url: str, venv: Path, out: Path, streams: int, config: PeerConfig) -> LoadResult:
    """One load: ours, guidellm, ours again, each on its own distinct prompts."""
    requests = config.loads[streams]

    def texts(tag: str) -> list[str]:
        return prompt_texts(f"c{streams}/{tag}", requests, config.prompt_tokens, config.seed)

    endpoint = Endpoint(url, metric_names=STEP_METRICS)
    mine = config.max_tokens
    first, w1 = _windowed(endpoint, lambda: run_ours(url, texts("ours-1"), streams, mine))
    data = out / f"guidellm-c{streams}.jsonl"
    data.write_text(guidellm_dataset(texts("guidellm"), config.max_tokens))
    report = out / f"guidellm-c{streams}.json"
    argv = guidellm_argv(venv, url, data=data, streams=streams, requests=requests, out=report)
    log = out / f"guidellm-c{streams}.log"
    _, wg = _windowed(endpoint, lambda: run_guidellm(argv, log, config.guidellm_timeout_s))
    second, w2 = _windowed(endpoint, lambda: run_ours(url, texts("ours-2"), streams, mine))
    return LoadResult(
        streams=streams,
        ours_first=first,
        ours_second=second,
        guidellm_report=str(report),
        windows=Windows(guidellm=wg, first=w1, second=w2),
    )


def rows_of(result: LoadResult) -> list[Row]:
    """The comparison rows of one load, after checking nothing came from the prefix cache.

    Raises:
        BenchError: when guidellm's report lacks the load, or any prompt hit the cache.
    """
    report = json.loads(Path(result.guidellm_report).read_text())
    found = [b for b in parse_guidellm(report) if b.streams == result.streams]
    if not found:
        raise BenchError(f"{result.guidellm_report}: no benchmark with {result.streams} streams")
    first, second = receipt_timings(result.ours_first), receipt_timings(result.ours_second)
    cached = cached_total([*found[0].timings, *first, *second])
    if cached:
        raise BenchError(f"c{result.streams}: {cached} prompt tokens came from the prefix cache")
    return compare(f"c{result.streams}", found[0], first, second, result.windows)


def check_prompt_length(url: str, config: PeerConfig) -> None:
    """The engine counts our prompts as intended (one token per character plus BOS).

    Raises:
        BenchError: when it does not (then guidellm's stated counts would be wrong).
    """
    text = prompt_texts("probe", 1, config.prompt_tokens, config.seed)[0]
    count = len(Endpoint(url).tokenize(text))
    if count != config.prompt_tokens:
        raise BenchError(f"engine counts {count} tokens for a {config.prompt_tokens}-token prompt")


def setup(venv: Path) -> None:
    """Create the peer venv (minutes: torch, transformers, datasets)."""
    for argv in setup_commands(venv):
        err_console.print("+", " ".join(argv), markup=False, highlight=False)
        subprocess.run(argv, check=True)


def parse_loads(text: str) -> dict[int, int]:
    """`1:8,4:16` -> {1: 8, 4: 16} (streams -> requests per run).

    Raises:
        argparse.ArgumentTypeError: on anything else (argparse turns it into a usage error).
    """
    loads: dict[int, int] = {}
    try:
        for part in text.split(","):
            streams, requests = (int(x) for x in part.split(":"))
            if streams < 1 or requests < streams:
                raise ValueError(part)
            loads[streams] = requests
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected STREAMS:REQUESTS,... with requests >= streams >= 1"
        ) from error
    return loads


def missing_venv_message(venv: Path) -> str:
    """What to run when the peer venv is absent."""
    return (
        f"guidellm is not installed in {venv}. Create it (separate from .venv) with:\n"
        "  python -m flows.research.peer --setup\n"
        "which runs:\n" + "\n".join("  " + " ".join(a) for a in setup_commands(venv))
    )


def check(out: Path, config: PeerConfig, venv: Path) -> list[Row]:
    """The whole peer check in one engine session; raw files and the table land in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    results = []
    with engine(out / "engine") as url:
        check_prompt_length(url, config)
        warm = prompt_texts("warmup", config.warmup_requests, config.prompt_tokens, config.seed)
        run_ours(url, warm, min(4, max(1, len(warm))), config.max_tokens)
        for streams in config.loads:
            err_console.print(f"load c{streams}: ours, guidellm, ours")
            result = run_load(url, venv, out, streams, config)
            (out / f"ours-c{streams}.json").write_text(result.model_dump_json(indent=1))
            results.append(result)
    rows = [row for result in results for row in rows_of(result)]
    (out / "comparison.json").write_text(json.dumps([r.model_dump() for r in rows], indent=1))
    (out / "comparison.md").write_text(markdown_table(rows) + "\n")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m flows.research.peer --out DIR` (or `--setup`); exit 2 without its venv."""
    parser = argparse.ArgumentParser(prog="python -m flows.research.peer", description=__doc__)
    parser.add_argument("--out", type=Path, help="folder for raw reports and the table")
    parser.add_argument("--setup", action="store_true", help="create the guidellm venv")
    parser.add_argument("--venv", type=Path, default=None, help="guidellm venv (default: state)")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--loads", type=parse_loads, default=None, help="STREAMS:REQUESTS,... (default 1:8,4:16)"
    )
    args = parser.parse_args(argv)
    venv = args.venv or peer_venv()
    if args.setup:
        setup(venv)
        if args.out is None:
            return 0
    if args.out is None:
        parser.error("--out is required")
    if not (venv / "bin" / "guidellm").exists():
        err_console.print(missing_venv_message(venv), markup=False, highlight=False)
        return 2
    config = PeerConfig(
        prompt_tokens=args.prompt_tokens,
        max_tokens=args.max_tokens,
        **({"loads": args.loads} if args.loads else {}),
    )
    try:
        rows = check(args.out, config, venv)
    except BenchError as error:
        err_console.print(f"error: {error}", markup=False, highlight=False)
        return 1
    out_console.print(markdown_table(rows), markup=False, highlight=False, soft_wrap=True)
    err_console.print(f"raw reports and comparison.json in {args.out}", markup=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
