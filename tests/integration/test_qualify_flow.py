"""The qualification flow end to end on the real engine, including resume after Ctrl-C.

A trimmed r1 (few prompts, two boot modes, no release tests) keeps this to a few minutes. The
first run is interrupted while the cold-boot gate runs; the second run must take the finished
determinism gate from the cache, run the rest, publish a record that verifies, and leave no
rank running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from flows.record import read_record, verify

from .conftest import ROOT, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _write(path: Path, document: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    """A trimmed r1 and a private two-node cluster, both overlays of the shipped files."""
    release = _write(tmp_path / "releases/r1.yaml", {
        "extends": str(ROOT / "releases/r1.yaml"),
        "set": {"gates": {
            "release_tests": {"enabled": False},
            "determinism": {"prompts": ["The quick brown fox", "Once upon a time"],
                            "max_tokens": 8, "long_prompt_tokens": 300, "sampled_streams": 1,
                            "stagger_ms": 20},
            "cold_boots": {"modes": ["warm", "one-rank-kernels"], "spot_check": 1,
                           "requests_after_ready": 2, "max_tokens": 4},
        }},
    })  # fmt: skip
    cluster = _write(tmp_path / "cluster.yaml", {
        "extends": str(ROOT / "config/local.yaml"),
        "set": {
            "name": "qualtest",
            "ports": {"rendezvous": free_port(), "api": free_port()},
            "nodes": [
                {"name": "q0", "rank": 0, "head": True, "address": "127.0.0.1",
                 "workdir": str(tmp_path / "q0")},
                {"name": "q1", "rank": 1, "address": "127.0.0.1",
                 "workdir": str(tmp_path / "q1")},
            ],
        },
    })  # fmt: skip
    return release, cluster


def _qualify(release: Path, cluster: Path, root: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "SPARKGATE_ROOT": str(root),
           "SPARKGATE_STATE_DIR": str(ROOT / ".sparkgate")}  # fmt: skip
    argv = [sys.executable, "-m", "flows", "qualify", str(release), "-c", str(cluster), "--no-wait"]
    return subprocess.Popen(
        argv, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


def _wait_for(path: Path, process: subprocess.Popen[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert process.poll() is None, f"qualify ended early:\n{process.communicate()[0]}"
        assert time.monotonic() < deadline, f"{path} not written in {timeout_s} s"
        time.sleep(0.5)


def test_interrupted_qualification_resumes_at_the_first_unfinished_gate(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    release, cluster = files
    record = tmp_path / "experiments" / f"{time.strftime('%Y-%m-%d')}-r1"
    first = _qualify(release, cluster, tmp_path)
    _wait_for(record / "determinism" / "result.json", first, 600)
    time.sleep(3)  # the cold-boot gate is under way
    os.killpg(first.pid, signal.SIGINT)
    output = first.communicate(timeout=120)[0]
    assert first.returncode != 0, output
    assert not (record / "README.md").exists(), "an interrupted run must not publish"
    assert not (record / "cold_boots" / "result.json").exists()

    second = _qualify(release, cluster, tmp_path)
    output = second.communicate(timeout=900)[0]
    assert second.returncode == 0, output
    assert "determinism gate: cached" in output
    assert "cold boots: passed" in output
    published = read_record(record)
    assert published.verdict == "qualified"
    assert verify(record) == []
    stages = {name: stage.outcome for name, stage in published.stages.items()}
    assert stages["determinism"] == "passed"
    assert stages["cold_boots"] == "passed"
    assert stages["benchmark"] == "skipped"
    ranks = subprocess.run(["pgrep", "-f", str(tmp_path / "q0")], check=False, capture_output=True)
    assert ranks.stdout == b"", "a rank is still running"
    summary = json.loads((record / "record.json").read_text())
    assert summary["verdict"] == "qualified"
