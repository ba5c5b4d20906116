"""Fault: the run stops between launching its embedded Prefect server and waiting for it.

`qualify` and `calibrate` launch the server before importing their flow, so that its start
overlaps the import, and wait for it after (`launched_backend`, then `Backend.ready()`). An
error or a Ctrl-C in between (a broken import, an impatient user) must stop the server too, and
leave neither its advert nor its secret: those are written only once it is healthy, by `ready()`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from flows.engine_api.ready import probe_ready
from flows.pipeline.embedded import SERVERS_DIR, Backend, launched_backend
from tests.support.prefect_servers import prefect_servers
from tests.support.processes import alive

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.prefect_server]

HEALTHY_WITHIN_S = 180  # a cold Prefect start on a busy 2-core machine


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private Prefect home, and no configured server (else nothing would be launched)."""
    for name in [name for name in os.environ if name.startswith("PREFECT_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    return tmp_path / "prefect"


def test_an_error_right_after_the_launch_stops_the_booting_server(home: Path) -> None:
    launched: list[Backend] = []
    with pytest.raises(RuntimeError, match="the flow's import failed"):
        _launch_then(home, launched, _fail_import)
    server = launched[0].server
    assert server is not None, "no PREFECT_API_URL: an embedded server was launched"
    assert server.returncode is not None, "the server outlived the run that launched it"
    assert not prefect_servers(home), "a server on this Prefect home still runs"
    assert not any((home / SERVERS_DIR).iterdir()), "a server that never served was advertised"
    assert launched[0].secret not in repr(launched[0]), "a traceback's repr shows the secret"


def test_a_ctrl_c_while_the_server_is_up_but_not_awaited_stops_it(home: Path) -> None:
    launched: list[Backend] = []
    with pytest.raises(KeyboardInterrupt):
        _launch_then(home, launched, _ctrl_c_once_healthy)
    server = launched[0].server
    assert server is not None
    assert not alive(server.pid), "the server outlived the run interrupted before it waited"
    left = sorted(file.name for file in (home / SERVERS_DIR).iterdir())
    assert left == [], f"the interrupted run's server left its advert or secret: {left}"


def _launch_then(home: Path, launched: list[Backend], between: Callable[[Backend], None]) -> None:
    """Launch the server, call `between` instead of importing a flow; never reach `ready()`."""
    with launched_backend(home / "logs") as backend:
        launched.append(backend)
        between(backend)


def _fail_import(backend: Backend) -> None:
    del backend
    raise RuntimeError("the flow's import failed")


def _ctrl_c_once_healthy(backend: Backend) -> None:
    """Wait until the server answers (a slow import outlasted its start), then Ctrl-C."""
    assert backend.server is not None
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    while not probe_ready(f"{backend.url}/health", timeout_s=2):
        assert backend.server.poll() is None, backend.log.read_text()
        assert time.monotonic() < deadline, "the embedded server never came up"
        time.sleep(0.2)
    # healthy, but nobody waited for it: not yet the run's server, so not advertised
    assert not any(backend.folder.iterdir()), "advertised before `ready()` waited for it"
    raise KeyboardInterrupt
