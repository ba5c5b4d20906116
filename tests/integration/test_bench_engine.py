"""`sparkgate bench run` against two real ranks of the bundled engine on loopback.

Runs every workload of release-local (one sample each, no warm-up, to stay short) and checks
that each point has receipts that succeeded and the numbers it is gated on.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.bench.report import read_arm
from flows.cli import main

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Two ranks of `python -m sparkengine serve`; always killed at the end."""
    root = tmp_path_factory.mktemp("bench-engine")
    model = root / "model"
    subprocess.run(
        [sys.executable, "-m", "sparkengine", "make-model", "--out", str(model), "--size", "tiny"],
        check=True, capture_output=True,
    )  # fmt: skip
    port, head = _free_port(), _free_port()
    procs = []
    for rank in range(2):
        argv = [
            sys.executable, "-m", "sparkengine", "serve", "--rank", str(rank), "--nnodes", "2",
            "--head", f"127.0.0.1:{head}", "--port", str(port), "--model", str(model),
            "--cache", f"kernels={root / str(rank) / 'kernels'}",
            "--cache", f"jit={root / str(rank) / 'jit'}",
        ]  # fmt: skip
        log = (root / f"rank{rank}.log").open("w")
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=os.environ))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while not _healthy(url):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = "\n".join((root / f"rank{r}.log").read_text()[-2000:] for r in range(2))
                pytest.fail(f"engine did not become ready:\n{logs}")
            time.sleep(0.5)
        yield url
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def test_release_local_writes_receipts_for_every_workload(engine: str, tmp_path: Path) -> None:
    suite = tmp_path / "trimmed.yaml"
    suite.write_text(
        f"extends: {ROOT / 'config/suites/release-local.yaml'}\n"
        "set:\n  name: release-local-trimmed\n  samples: 1\n  warmup: 0\n"
    )
    out = tmp_path / "arm"
    assert (
        main(["bench", "run", engine, "--suite", str(suite), "--out", str(out), "--label", "r1"])
        == 0
    )
    arm = read_arm(out)
    kinds = {point.workload for point in arm.points.values()}
    assert kinds == {"single_stream", "closed_loop", "poisson", "prefill", "step_grid", "prefix"}
    for name, point in arm.points.items():
        sample = point.samples[0]
        assert sample.receipts, name
        assert all(r.ok for r in sample.receipts), (name, [r.error for r in sample.receipts])
        assert set(point.gate) <= set(sample.metrics), (name, sample.metrics)
    prefill = arm.points["prefill/2048"].samples[0].receipts[0]
    assert prefill.prompt_tokens == 2048  # exact length through /tokenize
    assert (prefill.cached_tokens or 0) == 0  # cold: not even the first block is shared
    warm = arm.points["prefix/2048"].samples[0].receipts[1]
    assert (warm.cached_tokens or 0) > 1900
    assert arm.client is not None
    assert json.loads((out / "arm.json").read_text())["kind"] == "bench-arm"
