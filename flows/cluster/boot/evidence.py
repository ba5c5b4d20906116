"""Keep the evidence of a failed boot or stage before anything is torn down.

For every node: the rank's full log, what the runtime knows of it (status, exit code, OOM,
process table or `docker inspect`), the rendered launch plan, the cache listing and the node's
kernel journal since the start (`journalctl -k --since`: an Xid or an OOM kill is there, not in
the rank's log; the release thread reads it after every failed start), written to one folder per
attempt. The caller attaches the folder to the record; the message of the error
names it, so an operator finds it from the terminal.

Evidence is attached to records, which are committed: every file is written redacted (the plan
by its secret keys, `docker inspect` and the process table by key and by the secret values).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flows.cluster.boot.caches import cache_sizes
from flows.cluster.runtime.base import RankHandle, Runtime
from flows.cluster.transport.base import Transport
from flows.secrets import Secrets


def evidence_folder(root: Path, label: str) -> Path:
    """A new, unique folder under `root` for one failed attempt."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    folder = root / f"{stamp}-{label}"
    suffix = 1
    while folder.exists():
        suffix += 1
        folder = root / f"{stamp}-{label}-{suffix}"
    folder.mkdir(parents=True)
    return folder


def capture(
    folder: Path,
    runtime: Runtime,
    handles: Sequence[RankHandle],
    transports: Mapping[str, Transport],
    *,
    cause: str,
) -> Path:
    """Write every node's log, inspect output, launch plan and cache listing into `folder`."""
    found = Secrets()
    for handle in handles:
        found = found.merged(handle.plan.secrets())
    summary: dict[str, Any] = {
        "cause": found.text(cause),
        "captured_at": datetime.now(UTC).isoformat(),
    }
    nodes: dict[str, Any] = {}
    for handle in handles:
        stem = folder / f"{handle.node}-rank{handle.rank}"
        nodes[handle.node] = found.json(_capture_rank(stem, runtime, handle, found))
        nodes[handle.node] |= _journal(stem, transports.get(handle.node), handle, found)
    plans = [handle.plan for handle in handles]
    try:
        sizes = [size.model_dump() for size in cache_sizes(transports, plans)]
    except Exception as error:  # noqa: BLE001 - evidence must be written whatever fails
        sizes = [{"error": str(error)}]
    (folder / "caches.json").write_text(json.dumps(sizes, indent=2) + "\n")
    summary["nodes"] = nodes
    (folder / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return folder


def journal_argv(since: datetime) -> list[str]:
    """The node's kernel journal since `since` (whole seconds, so nothing at the start is lost)."""
    return [
        "journalctl",
        "-k",
        "--no-pager",
        "-o",
        "short-iso",
        f"--since=@{int(since.timestamp())}",
    ]


def _journal(
    stem: Path, transport: Transport | None, handle: RankHandle, found: Secrets
) -> dict[str, Any]:
    """Write the node's kernel journal lines since the rank started; what went wrong, if any."""
    if transport is None:
        return {"journal_error": "no transport to the node"}
    try:
        done = transport.run(journal_argv(handle.started_at), timeout=30)
    except Exception as error:  # noqa: BLE001 - evidence must be written whatever fails
        return {"journal_error": str(error)}
    stem.with_suffix(".journal.txt").write_text(found.text(done.stdout + done.stderr))
    return {} if done.ok else {"journal_error": f"journalctl exited {done.rc}"}


def _capture_rank(
    stem: Path, runtime: Runtime, handle: RankHandle, found: Secrets
) -> dict[str, Any]:
    plan = handle.plan.redacted(found)
    stem.with_suffix(".launch.json").write_text(plan.model_dump_json(indent=2) + "\n")
    shown = handle.model_copy(update={"plan": plan})
    facts: dict[str, Any] = {"rank": handle.rank, "handle": shown.model_dump(mode="json")}
    try:
        stem.with_suffix(".log").write_text(found.text(runtime.read_log(handle)))
    except Exception as error:  # noqa: BLE001 - a node that cannot be read is itself evidence
        facts["log_error"] = str(error)
    try:
        inspect = found.json(json.loads(json.dumps(runtime.inspect(handle), default=str)))
        stem.with_suffix(".inspect.json").write_text(json.dumps(inspect, indent=2))
        facts["status"] = inspect.get("status")
    except Exception as error:  # noqa: BLE001
        facts["inspect_error"] = str(error)
    return facts
