"""Fault: SIGKILL of `qualify`. Its embedded Prefect server ran on, in a session of its own,
with nobody left to stop it. Now the server asks the kernel to be signalled when its parent
dies, so it goes with a killed run.

Second round: the server went, but its advert (`<pid>.url`) and secret (`<pid>.auth`) stayed in
the Prefect home after SIGTERM or SIGKILL of the run, since only the run removed them. The server
now removes its own when it stops.
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


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killed_run_leaves_no_embedded_server_nor_its_files(
    tmp_path: Path, signum: signal.Signals
) -> None:
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
        adverts = tmp_path / "state" / "prefect" / "embedded-servers"
        assert sorted(f.name for f in adverts.iterdir()) == [f"{server}.auth", f"{server}.url"]
        run.send_signal(signum)  # the holder has no handler: no cleanup of ours runs
        run.communicate()
        deadline = time.monotonic() + 60  # a graceful stop, on a busy machine
        while (alive(server) or any(adverts.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(server), "the embedded Prefect server outlived its killed run"
        left = sorted(f.name for f in adverts.iterdir())
        assert left == [], f"the killed run's server URL and secret stayed behind: {left}"
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        if server and alive(server):
            os.killpg(server, signal.SIGKILL)
