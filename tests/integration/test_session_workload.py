"""Agent sessions as a workload, end to end on loopback: the bundled engine (two real ranks), the
recording proxy as its own `sparkgate bench record` process, a scripted agent through it, then
`bench replay` and a `bench run` of the shipped agent-session suite against the same engine.

The checks of issue 28, item 4: a recorded session of at least 20 turns with a growing context
replays with per-turn numbers, and its cached share from usage matches the engine's prefix-cache
counters (the bundled engine counts both the same way, so they agree exactly, turn by turn).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from flows.bench.report import read_arm
from flows.bench.session_file import read_session
from flows.cli import main
from flows.fileio import sha256_file
from flows.research import agent_session
from tests.integration.test_bench_engine import engine  # noqa: F401 - the engine fixture
from tests.support.net import free_port
from tests.support.overlays import overlay
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config/sessions/agent-example.jsonl"
TURNS = 22
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _replay(
    capsys: pytest.CaptureFixture[str], url: str, session: Path, *args: str
) -> list[dict[str, object]]:
    capsys.readouterr()
    assert main(["bench", "replay", url, str(session), "--json", *args]) == 0
    turns: list[dict[str, object]] = json.loads(capsys.readouterr().out)
    return turns


def _assert_per_turn_numbers_and_shares(turns: list[dict[str, object]]) -> None:
    prompts = [t["prompt_tokens"] for t in turns]
    assert prompts == sorted(prompts)
    assert len(set(prompts)) == len(prompts)  # the context grows every turn
    for t in turns:
        assert t["ok"], t
        assert isinstance(t["ttft_s"], float)
        assert t["ttft_s"] > 0
        assert isinstance(t["decode_tps"], float)
        assert t["decode_tps"] > 0
        assert t["prefill_s"] == t["ttft_s"]
        # usage and the engine's counters agree turn by turn
        assert t["engine_queries"] == t["prompt_tokens"], t
        assert t["engine_hits"] == t["cached_tokens"], t
    assert turns[0]["cached_tokens"] == 0  # the replay's salt: a cold start
    hits = sum(int(str(t["cached_tokens"])) for t in turns)
    assert hits / sum(int(str(t["prompt_tokens"])) for t in turns) > 0.8


def test_a_recorded_agent_session_replays_with_per_turn_numbers(
    engine: str,  # noqa: F811 - the imported fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    session = tmp_path / "session.jsonl"
    port = free_port()
    argv = [sys.executable, "-m", "flows", "bench", "record", engine, "--out", str(session),
            "--port", str(port), "--note", "integration"]  # fmt: skip
    log = tmp_path / "record.log"
    with log.open("w") as out:
        proxy = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        wait_until(lambda: _listening(port), 60, "the recording proxy", detail=log.read_text)
        assert agent_session.main([f"http://127.0.0.1:{port}", "--turns", str(TURNS)]) == 0
        proxy.send_signal(signal.SIGINT)  # Ctrl-C: every finished turn is already on disk
        assert proxy.wait(30) == 0, log.read_text()
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait(5)
    text = session.read_text()
    assert agent_session.DEMO_KEY not in text  # the bearer key never reaches the file
    recorded = read_session(session)
    assert len(recorded.turns) == TURNS
    assert all(t.headers.get("Authorization") == "<redacted>" for t in recorded.turns)
    assert all(t.status == 200 for t in recorded.turns)
    assert f"{TURNS} turns ->" in log.read_text()

    turns = _replay(capsys, engine, session)
    assert [t["turn"] for t in turns] == list(range(TURNS))
    _assert_per_turn_numbers_and_shares(turns)
    paced = _replay(capsys, engine, session, "--pace", "recorded", "--turns", "3")
    assert len(paced) == 3


def test_the_shipped_example_replays_alone_and_in_its_suite(
    engine: str,  # noqa: F811 - the imported fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shipped = read_session(EXAMPLE)
    assert len(shipped.turns) >= 20
    _assert_per_turn_numbers_and_shares(_replay(capsys, engine, EXAMPLE))

    suite = overlay(tmp_path / "one.yaml", "config/suites/agent-session.yaml",
                    name="agent-session-once", samples=1, warmup=0)  # fmt: skip
    out = tmp_path / "arm"
    assert main(["bench", "run", engine, "--suite", str(suite), "--out", str(out)]) == 0
    point = read_arm(out).points["session/agent-example"]
    assert point.workload == "session"
    assert point.gate[:2] == ["ttft_s", "tpot_ms"]
    assert point.info["session_sha256"] == sha256_file(EXAMPLE)  # which recording was replayed
    assert point.info["session_turns"] == len(shipped.turns)
    metrics = point.samples[0].metrics
    assert metrics["cached_share"] == metrics["engine_cached_share"]
    assert metrics["cached_share"] > 0.8
    assert sum(key.startswith("ttft_s@t") for key in metrics) == len(shipped.turns)
