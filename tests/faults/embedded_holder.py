"""A `qualify`-like process that owns an embedded Prefect server, for the orphan test.

`python embedded_holder.py LOG_DIR PID_FILE` starts the embedded server, writes the server's pid
to PID_FILE, and waits to be killed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from flows.settings import prefect_environment

prefect_environment()

from flows.pipeline.embedded import prefect_backend, servers_dir  # noqa: E402

if __name__ == "__main__":
    with prefect_backend(Path(sys.argv[1])):
        pid = next(servers_dir().glob("*.url")).stem
        Path(sys.argv[2]).write_text(pid)
        time.sleep(300)
