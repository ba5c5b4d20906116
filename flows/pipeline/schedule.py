"""Server-mode scheduling: one qualification per cluster across every worker, and the deployed flow.

The cluster lock (a file on the head node) already refuses a second run on the same cluster, but
it refuses at once. With a Prefect server, runs of several deployments and workers meet first at
a global concurrency limit named `cluster:<name>` (limit 1, created on first use), so a nightly
run that collides with a manual one waits for the slot instead of failing, and the UI shows who
holds the cluster. Its lease is renewed while the run lives and expires soon after a killed
holder, which the server's repossessor returns. In embedded mode the guard is a no-op: ephemeral
servers run no repossessor, so a killed run would leak the slot for good (reference prefect-3.md,
section 3), and the file lock alone is the right guard there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from typing import Annotated

from pydantic import AfterValidator, Field

from flows.errors import LockHeldError, SpecError

SLOT_PREFIX = "cluster:"
LEASE_S = 60.0
WAIT_ENV = "SPARKGATE_CLUSTER_SLOT_WAIT_S"
DEFAULT_WAIT_S = 4 * 3600.0

SPEC_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


def _no_parent(name: str) -> str:
    if ".." in name:
        raise ValueError("a name, not a path: `..` is not allowed")
    return name


SpecName = Annotated[
    str, Field(min_length=1, max_length=128, pattern=SPEC_NAME), AfterValidator(_no_parent)
]
"""A release or cluster as a scheduled run's parameter: a name looked up in the project's
releases/ or config/, never a path (no `/`, no `..`), so whoever can create a run cannot make
the worker read a spec from elsewhere on its machine."""


def slot_name(cluster: str) -> str:
    """The global concurrency limit guarding one cluster."""
    return f"{SLOT_PREFIX}{cluster}"


def server_mode() -> bool:
    """True when PREFECT_API_URL names a server other than this run's embedded one.

    The embedded server's URL is in the settings too (every Prefect call must reach it), so the
    URL alone does not tell the modes apart: without this check an embedded run took a slot on
    its own server, which died with a killed run and left the slot taken in the database.
    """
    from prefect.settings import get_current_settings  # noqa: PLC0415

    from flows.pipeline.embedded import embedded_url  # noqa: PLC0415

    url = get_current_settings().api.url
    return bool(url) and url != embedded_url()


def slot_wait_s() -> float:
    """How long a run waits for its cluster's slot: SPARKGATE_CLUSTER_SLOT_WAIT_S, else 4 h."""
    raw = os.environ.get(WAIT_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_WAIT_S
    except ValueError as error:
        raise SpecError(f"{raw!r} is not a number", key=WAIT_ENV, expected="seconds") from error
    if value < 0:
        raise SpecError(f"{raw!r} is negative", key=WAIT_ENV, expected="seconds >= 0")
    return value


def ensure_slot(name: str) -> None:
    """Create the limit (1 slot) unless it exists; an operator's later changes are kept."""
    from prefect.client.orchestration import get_client  # noqa: PLC0415
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate  # noqa: PLC0415
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound  # noqa: PLC0415

    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            with suppress(ObjectAlreadyExists):  # another run created it a moment ago
                client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=name, limit=1)
                )


def release_slot(cluster: str) -> int:
    """Give the cluster's slot back whoever holds it (`cluster unlock --force`); how many slots
    were taken. 0 in embedded mode and when the limit does not exist.

    A holder that died has its lease repossessed by the server within about LEASE_S; this is for
    the operator who knows the holder is gone (or stopped) and will not wait.
    """
    if not server_mode():
        return 0
    from prefect.client.orchestration import get_client  # noqa: PLC0415
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate  # noqa: PLC0415
    from prefect.exceptions import ObjectNotFound  # noqa: PLC0415

    name = slot_name(cluster)
    with get_client(sync_client=True) as client:
        try:
            taken = client.read_global_concurrency_limit_by_name(name).active_slots
        except ObjectNotFound:
            return 0
        if taken:
            client.update_global_concurrency_limit(
                name, GlobalConcurrencyLimitUpdate(active_slots=0)
            )
    return taken


@contextmanager
def cluster_slot(cluster: str, *, wait_s: float | None = None) -> Iterator[str | None]:
    """Hold the cluster's slot in server mode (yields its name); embedded mode yields None.

    Raises:
        LockHeldError: when the slot stays taken for `wait_s` (default `slot_wait_s()`).
    """
    if not server_mode():
        yield None
        return
    from prefect.concurrency.sync import concurrency  # noqa: PLC0415

    name = slot_name(cluster)
    ensure_slot(name)
    wait = slot_wait_s() if wait_s is None else wait_s
    with ExitStack() as stack:
        try:
            stack.enter_context(
                concurrency(
                    name, occupy=1, timeout_seconds=wait, strict=True, lease_duration=LEASE_S
                )
            )
        except TimeoutError as error:
            raise LockHeldError(
                f"{cluster}: the Prefect concurrency limit {name!r} stayed taken for {wait:g} s "
                f"(another run holds the cluster; see `prefect gcl inspect {name}`)"
            ) from error
        yield name
