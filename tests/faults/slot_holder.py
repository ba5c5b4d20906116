"""A run that takes a cluster's Prefect concurrency slot, for the slot faults.

`python slot_holder.py CLUSTER READY_FILE` (PREFECT_API_URL names a server) takes the slot
`cluster:CLUSTER` as a qualification does, writes READY_FILE, and holds it until stopped.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from flows.settings import prefect_environment

prefect_environment()

from flows.pipeline.schedule import cluster_slot  # noqa: E402

if __name__ == "__main__":
    with cluster_slot(sys.argv[1], wait_s=60):
        Path(sys.argv[2]).write_text("held")
        time.sleep(600)
