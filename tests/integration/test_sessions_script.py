"""The sessions script runs the benchmark gate's real session on a cluster and keeps the verdicts.

One session of r1 against itself (A/A) with the short suite on a private two-node cluster: the
script builds and installs once, boots every arm fresh, and writes sessions.json with the
decision, the arms and every gated verdict, then prints the distribution.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.overlays import write_yaml
from tests.support.prefect_server import Server
from tests.support.project import SHORT_SUITE, Project

pytestmark = [
    pytest.mark.integration, pytest.mark.slow, pytest.mark.prefect_server,
    pytest.mark.timeout(900),
]  # fmt: skip


def test_one_aa_session_is_run_and_kept(tmp_path: Path, prefect_api: Server) -> None:
    project = Project(tmp_path, "sessionstest")
    project.use_server(prefect_api)  # the script's flow reports to the session's server
    suite = write_yaml(project.root / "suites/short.yaml", SHORT_SUITE)
    r1 = project.release("r1", "releases/r1.yaml", benchmark={"suite": str(suite)})
    out = project.root / "sessions"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "flows.research.sessions", str(r1),
             "--previous", str(r1), "--sessions", "1", "--max-arms", "3",
             "--cluster", str(project.cluster), "--out", str(out)],
            env=project.env, cwd=project.root, capture_output=True, text=True, timeout=800,
            check=False,
        )  # fmt: skip
    finally:
        project.stop()
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    (kept,) = list(out.glob("r1-vs-r1-*/sessions.json"))
    (row,) = json.loads(kept.read_text())
    assert row["arms"] == 3
    assert row["decision"] in {"pass", "fail-inconclusive", "fail-slower"}
    assert set(row["verdicts"]) == {"streams/c1 engine_cpu_ms", "prefill/1024 engine_cpu_ms"}
    assert "1 sessions:" in done.stdout
