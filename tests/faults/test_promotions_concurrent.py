"""Fault: promotions at the same moment. Two processes x 200 promotions left 202 of 400 entries
in the promoted pointer (each read the pointer, then replaced it with its own version) while
the log kept 400. Pointer updates now hold a flock on `config/`, so no history is lost (here
in the default cluster's pointer, `config/promoted/local.yaml`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

PROMOTER = Path(__file__).with_name("promoter.py")
ROOT = Path(__file__).resolve().parents[2]
PROCESSES, EACH = 2, 50


def test_concurrent_promotions_keep_every_history_entry(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'engine'}",
        "SPARKGATE_ROOT": str(tmp_path),
        "SPARKGATE_STATE_DIR": str(tmp_path / "state"),
    }
    runs = [
        subprocess.Popen(
            [sys.executable, str(PROMOTER), f"p{number}", str(EACH)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for number in range(PROCESSES)
    ]
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-2000:]
    pointer = yaml.safe_load((tmp_path / "config/promoted/local.yaml").read_text())
    entries = [pointer["current"], *pointer["history"]]
    names = {entry["release"] for entry in entries}
    assert len(entries) == PROCESSES * EACH, f"{PROCESSES * EACH - len(entries)} entries lost"
    assert names == {f"p{p}-{n}" for p in range(PROCESSES) for n in range(EACH)}
    log = (tmp_path / "experiments" / "promotions.jsonl").read_text().splitlines()
    assert len(log) == PROCESSES * EACH
