"""Attack: a real embedded `qualify` started a second Prefect server mid-run.

A Prefect call from a thread without Prefect's settings context found no API URL and started
Prefect's own temporary server: unauthenticated, on the run's database, so anyone local could
resume the paused run with `decision: approve`. Watched with `ps` through a real, trimmed
qualification on the local cluster, the run now has exactly one Prefect server, and it refuses
a request without the run's secret.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.prefect_servers import prefect_servers
from tests.support.project import Project

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.prefect_server,
    pytest.mark.timeout(1200),
]


def test_an_embedded_qualification_runs_exactly_one_authenticated_prefect_server(
    tmp_path: Path,
) -> None:
    project = Project(tmp_path, "oneserver")
    release = project.release("r1", "releases/r1.yaml")
    run = project.start("qualify", str(release), "-c", str(project.cluster), "--no-wait")
    seen: dict[int, str] = {}
    refused: list[int] = []
    adverts = tmp_path / "prefect" / "embedded-servers"
    lines: list[str] = []  # read all along: a full pipe would stall the run
    reader = threading.Thread(target=lambda: lines.extend(run.stdout or []), daemon=True)
    reader.start()
    try:
        while run.poll() is None:
            seen.update((server.pid, server.args) for server in prefect_servers(tmp_path))
            urls = [f.read_text().strip() for f in adverts.glob("*.url")] if not refused else []
            if urls:
                answer = httpx.post(f"{urls[0]}/flow_runs/filter", json={}, timeout=30)
                refused.append(answer.status_code)
            time.sleep(0.3)
    finally:
        if run.poll() is None:
            run.kill()
        run.wait()
        reader.join(timeout=30)
        if run.stdout is not None:
            run.stdout.close()
        project.stop()
    assert run.returncode == 0, "".join(lines)
    assert len(seen) == 1, f"{len(seen)} Prefect servers for one run: {seen}"
    assert refused == [401], f"the run's server answered {refused} without its secret"
