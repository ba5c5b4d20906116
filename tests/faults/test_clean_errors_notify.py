"""Fault: `sparkgate notify` with PREFECT_API_URL pointing at no server printed an httpx
traceback. It now says which server could not be reached, and why, with exit 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.net import free_port
from tests.support.overlays import ROOT


def test_notify_with_an_unreachable_api_is_a_clean_error(tmp_path: Path) -> None:
    api = f"http://127.0.0.1:{free_port()}/api"
    done = subprocess.run(
        [sys.executable, "-m", "flows", "notify", "https://1.1.1.1/hook"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PREFECT_API_URL": api,
             "PREFECT_HOME": str(tmp_path / "prefect")},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"cannot create the automation on the Prefect server at {api}" in done.stderr
    assert "Connect" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
