"""`sparkgate bench run` against two real ranks of the bundled engine on loopback.

Runs every workload of release-local (one sample each, no warm-up, to stay short) and checks
that each point has receipts that succeeded and the numbers it is gated on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.bench.report import read_arm
from flows.cli import main
from tests.support.net import free_port
from tests.support.overlays import overlay
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
# A copy of ../shared/data/recipe-bench/baseline-2026-10-10-karmic-kraken-r6d.json (its hosts).
MANIFEST = ROOT / "tests/unit/bench/data/recipe-bench/baseline-2026-10-10-karmic-kraken-r6d.json"
pytestmark = [pytest.mark.integration, pytest.mark.slow]


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
    port, head = free_port(), free_port()
    procs = []
    for rank in range(2):
        argv = [
            sys.executable, "-m", "sparkengine", "serve", "--rank", str(rank), "--nnodes", "2",
            "--head", f"127.0.0.1:{head}", "--port", str(port), "--model", str(model),
            "--cache", f"kernels={root / str(rank) / 'kernels'}",
            "--cache", f"jit={root / str(rank) / 'jit'}",
        ]  # fmt: skip
        with (root / f"rank{rank}.log").open("w") as log:  # the rank keeps its own descriptor
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
    url = f"http://127.0.0.1:{port}"

    def logs() -> str:
        return "\n".join((root / f"rank{r}.log").read_text()[-2000:] for r in range(2))

    def ready() -> bool:
        assert all(p.poll() is None for p in procs), f"a rank exited:\n{logs()}"
        return _healthy(url)

    try:
        wait_until(ready, 180, "the engine's /health", detail=logs)
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
    suite = overlay(tmp_path / "trimmed.yaml", "config/suites/release-local.yaml",
                    name="release-local-trimmed", samples=1, warmup=0)  # fmt: skip
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


def test_a_single_stream_run_keeps_host_facts_and_compares_across_clusters(
    engine: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench run -c local` reads the local cluster's host facts into the arm; a second arm
    stands for the published side with the recipe r6d manifest's facts (`--facts`), and
    `bench compare` sets them side by side with the per-step rows and their caveats."""
    suite = overlay(
        tmp_path / "single.yaml", "config/suites/single-stream.yaml",
        name="single-stream-trimmed", samples=2, warmup=0,
        workloads=[{"kind": "single_stream", "name": "single", "requests": 3,
                    "prompt_tokens": 64, "max_tokens": 16}],
    )  # fmt: skip
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    run = ["bench", "run", engine, "--suite", str(suite), "--out"]
    assert main([*run, str(mine), "--label", "mine", "-c", "local"]) == 0
    assert main([*run, str(theirs), "--label", "theirs", "--facts", str(MANIFEST)]) == 0
    facts = read_arm(mine).host_facts
    assert facts is not None
    assert (facts.cluster, facts.source) == ("local", "probes.facts of local")
    assert all(values["kernel"] for values in facts.nodes.values())
    assert "host facts of local: 3 on 2 node(s)" in capsys.readouterr().err
    assert main(["bench", "compare", str(mine), str(theirs)]) == 3  # one arm a side: undecided
    err = capsys.readouterr().err
    assert "other side: theirs: dgx1, dgx2, dgx3, dgx4 (recipe manifest" in err
    assert "580.178.04" in err
    assert "not recorded" in err
    steps = [line for line in err.splitlines() if line.startswith("  single/c1 ")]
    assert {line.split()[1].rstrip(":") for line in steps} >= {"tpot_p50_ms", "engine_cpu_ms"}
    assert "what this comparison cannot prove:" in err
