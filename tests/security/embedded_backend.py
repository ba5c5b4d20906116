"""A `qualify`-like process that owns an embedded Prefect server, for the API-auth attacks.

`python embedded_backend.py LOG_DIR READY_FILE` starts the embedded server, then does what a run
does off its main thread: a bare thread (no Prefect settings context, like a pool worker or
Prefect's own log and event workers) asks the API for flow runs, and the main thread asks for the
cluster's slot. It writes what they got to READY_FILE.probe.json, then the API URL to READY_FILE,
and waits to be stopped (SIGTERM ends it cleanly).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from flows.settings import prefect_environment

prefect_environment()

from flows.pipeline.embedded import prefect_backend  # noqa: E402
from flows.pipeline.schedule import cluster_slot  # noqa: E402


def _stop(signum: int, frame: FrameType | None) -> None:
    del signum, frame
    raise KeyboardInterrupt


def _from_a_bare_thread() -> str:
    """What a Prefect call from a thread without the settings context reaches."""
    answer: list[str] = []

    def call() -> None:
        from prefect.client.orchestration import get_client  # noqa: PLC0415

        try:
            with get_client(sync_client=True) as client:
                runs = client.read_flow_runs(limit=1)
            answer.append(f"{client.api_url} ok {len(runs)}")
        except Exception as error:
            answer.append(f"{type(error).__name__}: {error}")

    thread = threading.Thread(target=call)
    thread.start()
    thread.join(timeout=240)
    return answer[0] if answer else "no answer"


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop)
    ready = Path(sys.argv[2])
    try:
        with prefect_backend(Path(sys.argv[1])) as url:
            with cluster_slot("embedded-probe", wait_s=5) as slot:
                probe = {"thread": _from_a_bare_thread(), "slot": slot}
            ready.with_name(ready.name + ".probe.json").write_text(json.dumps(probe))
            ready.write_text(url)
            time.sleep(300)
    except KeyboardInterrupt:
        pass
