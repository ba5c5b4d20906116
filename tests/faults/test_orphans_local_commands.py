"""Fault: Ctrl-C (or SIGTERM) while a local pytest, pip or model preparation runs. The child
runs in a session of its own, so the interrupt reached only sparkgate, which exited and left the
child running. Now an interrupted wait stops the child's whole process group first.
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

HOLDER = Path(__file__).with_name("local_command_holder.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_command_leaves_no_local_child(tmp_path: Path, sig: signal.Signals) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'engine'}"}
    pid_file = tmp_path / "child.pid"
    run = subprocess.Popen(
        [sys.executable, str(HOLDER), str(pid_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    child = 0
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists():
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert alive(child)
        run.send_signal(sig)
        run.communicate(timeout=30)
        deadline = time.monotonic() + 10
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(child), f"the local child outlived the {sig.name}ed command"
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        if child and alive(child):
            os.kill(child, signal.SIGKILL)
