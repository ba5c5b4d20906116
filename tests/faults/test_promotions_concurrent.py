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


def _promote_at_once(root: Path, *clusters: str) -> None:
    """PROCESSES promoters at the same moment (the n-th on clusters[n] when given)."""
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'engine'}",
        "SPARKGATE_ROOT": str(root),
        "SPARKGATE_STATE_DIR": str(root / "state"),
    }
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                str(PROMOTER),
                f"p{number}",
                str(EACH),
                *clusters[number : number + 1],
            ],
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


def test_concurrent_promotions_keep_every_history_entry(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    _promote_at_once(tmp_path)
    pointer = yaml.safe_load((tmp_path / "config/promoted/local.yaml").read_text())
    entries = [pointer["current"], *pointer["history"]]
    names = {entry["release"] for entry in entries}
    assert len(entries) == PROCESSES * EACH, f"{PROCESSES * EACH - len(entries)} entries lost"
    assert names == {f"p{p}-{n}" for p in range(PROCESSES) for n in range(EACH)}
    log = (tmp_path / "experiments" / "promotions.jsonl").read_text().splitlines()
    assert len(log) == PROCESSES * EACH


def test_concurrent_first_promotions_on_two_clusters_each_keep_the_legacy_history(
    tmp_path: Path,
) -> None:
    """Two clusters move from the project-wide pointer at once: each gets the legacy entry and
    exactly its own promotions, and the legacy file is left as it was."""
    legacy = tmp_path / "config" / "promoted.yaml"
    legacy.parent.mkdir()
    old = {
        "release": "r0", "release_file": "releases/r0.yaml", "build_digest": "a" * 64,
        "record": "experiments/r0", "at": "2026-12-01T10:00:00Z", "by": "x", "reason": "",
    }  # fmt: skip
    legacy.write_text(yaml.safe_dump({"current": old, "history": []}))
    before = legacy.read_text()
    _promote_at_once(tmp_path, "alpha", "beta")
    for number, cluster in enumerate(("alpha", "beta")):
        pointer = yaml.safe_load((tmp_path / f"config/promoted/{cluster}.yaml").read_text())
        names = [entry["release"] for entry in [pointer["current"], *pointer["history"]]]
        assert names == [f"p{number}-{n}" for n in reversed(range(EACH))] + ["r0"]
    assert legacy.read_text() == before
    log = (tmp_path / "experiments" / "promotions.jsonl").read_text().splitlines()
    assert len(log) == PROCESSES * EACH
