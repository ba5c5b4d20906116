"""Fault: SIGKILL of `qualify`. Its embedded Prefect server ran on, in a session of its own,
with nobody left to stop it. Now the server asks the kernel to be signalled when its parent
dies, so it goes with a killed run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.processes import alive

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.prefect_server]

HOLDER = Path(__file__).with_name("embedded_holder.py")
ROOT = Path(__file__).resolve().parents[2]


def test_sigkilled_run_leaves_no_embedded_server(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")} | {
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'engine'}",
        "SPARKGATE_ROOT": str(tmp_path),
        "SPARKGATE_STATE_DIR": str(tmp_path / "state"),
    }
    (tmp_path / "state" / "prefect").mkdir(parents=True)
    pid_file = tmp_path / "server.pid"
    run = subprocess.Popen(
        [sys.executable, str(HOLDER), str(tmp_path / "logs"), str(pid_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    server = 0
    try:
        deadline = time.monotonic() + 180
        while not pid_file.exists():
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "the embedded server never came up"
            time.sleep(0.2)
        server = int(pid_file.read_text())
        assert alive(server)
        run.kill()  # SIGKILL: no cleanup of ours runs
        run.communicate()
        deadline = time.monotonic() + 30
        while alive(server) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(server), "the embedded Prefect server outlived its killed run"
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        if server and alive(server):
            os.killpg(server, signal.SIGKILL)
