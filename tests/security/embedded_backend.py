"""A `qualify`-like process that owns an embedded Prefect server, for the API-auth attack.

`python embedded_backend.py LOG_DIR READY_FILE` starts the embedded server, writes its API URL
to READY_FILE once it is healthy, and waits to be stopped (SIGTERM ends it cleanly).
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from types import FrameType

from flows.settings import prefect_environment

prefect_environment()

from flows.pipeline.embedded import prefect_backend  # noqa: E402


def _stop(signum: int, frame: FrameType | None) -> None:
    del signum, frame
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop)
    try:
        with prefect_backend(Path(sys.argv[1])) as url:
            Path(sys.argv[2]).write_text(url)
            time.sleep(300)
    except KeyboardInterrupt:
        pass
