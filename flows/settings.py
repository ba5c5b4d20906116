"""Project-local paths and the Prefect environment, fixed before anything imports prefect.

Prefect reads its settings at import time, so `prefect_environment()` must run first: it points
PREFECT_HOME at a folder inside the project (no state in the user's home), raises the embedded
server's startup timeout for small machines and turns telemetry off. A PREFECT_API_URL the user
set is left alone: then a real server is used instead of the embedded one.

Prefect's own temporary servers are turned off, whatever the profile says: Prefect starts one,
unauthenticated and behind the run's back, for any call that finds no API URL (a thread without
the settings context, a client made outside it). sparkgate starts its embedded server itself
(`flows.pipeline.embedded`), so such a call now fails loudly instead.
"""

from __future__ import annotations

import os
from pathlib import Path

STATE_DIR_NAME = ".sparkgate"
NO_TEMPORARY_SERVERS = ("PREFECT_SERVER_EPHEMERAL_ENABLED", "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE")


def project_root() -> Path:
    """The checkout sparkgate runs from: SPARKGATE_ROOT, else the current directory."""
    return Path(os.environ.get("SPARKGATE_ROOT", Path.cwd())).resolve()


def state_dir() -> Path:
    """Project-local state (Prefect home, results, lab hosts, builds); ignored by git.

    SPARKGATE_STATE_DIR moves it (tests share one build cache and Prefect home this way).
    """
    override = os.environ.get("SPARKGATE_STATE_DIR")
    return Path(override).resolve() if override else project_root() / STATE_DIR_NAME


def prefect_home() -> Path:
    """The Prefect home `prefect_environment()` chose, read as Prefect reads it (call after it).

    Read from the environment, not Prefect's settings: the embedded server is launched before
    Prefect is imported, so that its start overlaps that import.
    """
    return Path(os.environ["PREFECT_HOME"]).expanduser()


def prefect_environment() -> None:
    """Set Prefect's environment defaults; call before the first `import prefect`."""
    home = state_dir() / "prefect"
    defaults = {
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(home / "results"),
    }
    for name, value in defaults.items():
        os.environ.setdefault(name, value)
    for name in NO_TEMPORARY_SERVERS:  # forced: a profile or shell must not turn them back on
        os.environ[name] = "false"
    # Prefect creates its home without parents and warns on a fresh clone; make it first.
    Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
