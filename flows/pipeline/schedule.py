"""Server-mode scheduling: one qualification per cluster across every worker, and the deployed flow.

The cluster lock (a file on the head node) already refuses a second run on the same cluster, but
it refuses at once. With a Prefect server, runs of several deployments and workers meet first at
a global concurrency limit named `cluster:<name>` (limit 1, created on first use), so a nightly
run that collides with a manual one waits for the slot instead of failing, and the UI shows who
holds the cluster. Its lease is renewed while the run lives and expires soon after a killed
holder, which the server's repossessor returns. The holder records itself with the slot (pid,
host, run, lease: a Prefect variable, flows/cluster/ops/slot_holder.py), so a refusal and
`cluster status` name it, and a run waiting on the same host gives back the lease of a holder
that is gone at once instead of waiting for the lease to run out. In embedded mode the guard is
a no-op: ephemeral servers run no repossessor, so a killed run would leak the slot for good
(reference prefect-3.md, section 3), and the file lock alone is the right guard there.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Annotated
from uuid import UUID

from pydantic import AfterValidator, Field, ValidationError

from flows.cluster.ops.slot_holder import SlotHolder, liveness, this_process
from flows.errors import ClusterError, LockHeldError, SpecError

log = logging.getLogger(__name__)

SLOT_PREFIX = "cluster:"
LEASE_S = 60.0
WAIT_ENV = "SPARKGATE_CLUSTER_SLOT_WAIT_S"
DEFAULT_WAIT_S = 4 * 3600.0
HOLDER_POLL_S = 2.0
"""How often a run waiting for the slot looks at who holds it."""

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


def holder_variable(cluster: str) -> str:
    """The Prefect variable the slot's holder records itself in (names allow no dots)."""
    readable = re.sub(r"[^A-Za-z0-9_-]", "_", cluster)
    return f"sparkgate-slot-holder-{readable}-{hashlib.sha256(cluster.encode()).hexdigest()[:8]}"


def read_holder(cluster: str) -> SlotHolder | None:
    """The holder recorded with the cluster's slot, None when none is (or it is unreadable)."""
    from prefect.client.orchestration import get_client  # noqa: PLC0415

    with get_client(sync_client=True) as client:
        variable = client.read_variable_by_name(holder_variable(cluster))
    if variable is None:
        return None
    try:
        return SlotHolder.model_validate(variable.value)
    except ValidationError:
        return None


def _record_holder(cluster: str, holder: SlotHolder) -> None:
    from prefect.client.orchestration import get_client  # noqa: PLC0415
    from prefect.client.schemas.actions import VariableCreate, VariableUpdate  # noqa: PLC0415
    from prefect.exceptions import ObjectAlreadyExists  # noqa: PLC0415

    name, value = holder_variable(cluster), holder.model_dump(mode="json")
    with get_client(sync_client=True) as client:
        try:
            client.create_variable(VariableCreate(name=name, value=value))
        except ObjectAlreadyExists:
            client.update_variable(VariableUpdate(name=name, value=value))


def _forget_holder(cluster: str, lease_id: str | None) -> None:
    """Remove the holder record if it is the one of `lease_id` (None: whichever it is)."""
    from prefect.client.orchestration import get_client  # noqa: PLC0415
    from prefect.exceptions import ObjectNotFound  # noqa: PLC0415

    recorded = read_holder(cluster)
    if recorded is not None and lease_id is not None and recorded.lease_id != lease_id:
        return
    with get_client(sync_client=True) as client, suppress(ObjectNotFound):
        client.delete_variable_by_name(holder_variable(cluster))


def _give_back_lease(lease_id: str) -> None:
    """End a lease and free its slot at once (a second call, or an expired lease: nothing)."""
    from prefect.client.orchestration import get_client  # noqa: PLC0415

    with get_client(sync_client=True) as client:
        client.release_concurrency_slots_with_lease(UUID(lease_id))


def slot_status(cluster: str) -> str | None:
    """Who holds the cluster's slot, in one line; None in embedded mode (no slot is taken)."""
    if not server_mode():
        return None
    from prefect.client.orchestration import get_client  # noqa: PLC0415
    from prefect.exceptions import ObjectNotFound  # noqa: PLC0415

    with get_client(sync_client=True) as client:
        try:
            taken = client.read_global_concurrency_limit_by_name(slot_name(cluster)).active_slots
        except ObjectNotFound:
            taken = 0
    holder = read_holder(cluster)
    if not taken:
        return f"{slot_name(cluster)!r} is free"
    if holder is None:
        return f"{slot_name(cluster)!r} is taken; its holder recorded nothing (an older sparkgate?)"
    return f"{slot_name(cluster)!r} is held by {holder.describe(liveness(holder))}"


def release_slot(cluster: str) -> int:
    """Give the cluster's slot back whoever holds it (`cluster unlock --force`); how many slots
    were taken. 0 in embedded mode and when the limit does not exist.

    The recorded holder's lease is ended (so the server never frees that slot a second time when
    the lease would have run out); a slot taken without a record is reset. A holder that died
    has its lease repossessed within about LEASE_S, or given back by the next run on its host;
    this is for the operator who knows the holder is gone (or stopped) and will not wait.
    """
    if not server_mode():
        return 0
    from prefect.client.orchestration import get_client  # noqa: PLC0415
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate  # noqa: PLC0415
    from prefect.exceptions import ObjectNotFound  # noqa: PLC0415

    name = slot_name(cluster)
    holder = read_holder(cluster)
    with get_client(sync_client=True) as client:
        try:
            taken = client.read_global_concurrency_limit_by_name(name).active_slots
        except ObjectNotFound:
            return 0
        if holder is not None:
            client.release_concurrency_slots_with_lease(UUID(holder.lease_id))
        if client.read_global_concurrency_limit_by_name(name).active_slots:
            client.update_global_concurrency_limit(
                name, GlobalConcurrencyLimitUpdate(active_slots=0)
            )
    _forget_holder(cluster, None)
    return taken


@contextmanager
def cluster_slot(
    cluster: str, *, wait_s: float | None = None, command: str = ""
) -> Iterator[str | None]:
    """Hold the cluster's slot in server mode (yields its name), recorded with its holder;
    embedded mode yields None.

    Raises:
        LockHeldError: when the slot stays taken for `wait_s` (default `slot_wait_s()`), naming
            the holder.
    """
    if not server_mode():
        yield None
        return
    # the steps of prefect.concurrency.sync.concurrency, which keeps the lease id to itself
    from prefect.concurrency._leases import maintain_concurrency_lease  # noqa: PLC0415

    name = slot_name(cluster)
    ensure_slot(name)
    lease_id = _acquire(cluster, slot_wait_s() if wait_s is None else wait_s)
    try:
        _record_holder(
            cluster,
            this_process(
                pid=os.getpid(), lease_id=str(lease_id), run_id=_run_id(), command=command
            ),
        )
        with maintain_concurrency_lease(lease_id, LEASE_S, raise_on_lease_renewal_failure=True):
            yield name
    finally:
        with suppress(Exception):  # the record names a lease that is ended below anyway
            _forget_holder(cluster, str(lease_id))
        _give_back_lease(str(lease_id))


def _acquire(cluster: str, wait: float) -> UUID:
    """Take the slot within `wait` seconds and return the lease; looking at the recorded holder
    every HOLDER_POLL_S, and giving back the lease of one that is gone from this host."""
    name = slot_name(cluster)
    deadline = time.monotonic() + wait
    while (lease_id := _try_take(name)) is None:
        holder = read_holder(cluster)
        state = liveness(holder) if holder is not None else None
        if holder is not None and state == "gone":
            log.warning("%s: the slot's holder is gone (%s): giving back its lease",
                        cluster, holder.describe("gone"))  # fmt: skip
            _give_back_lease(holder.lease_id)
            _forget_holder(cluster, holder.lease_id)
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            who = "nobody recorded" if holder is None else holder.describe(state or "running")
            raise LockHeldError(
                f"{cluster}: the Prefect concurrency limit {name!r} stayed taken for {wait:g} s: "
                f"held by {who} (see `sparkgate cluster status`, `prefect gcl inspect {name}`)"
            )
        time.sleep(min(HOLDER_POLL_S, left))
    return lease_id


def _try_take(name: str) -> UUID | None:
    """One attempt at the slot: its lease, or None while another holds it (HTTP 423)."""
    import httpx  # noqa: PLC0415
    from prefect.client.orchestration import get_client  # noqa: PLC0415
    from prefect.client.schemas.responses import (  # noqa: PLC0415
        ConcurrencyLimitWithLeaseResponse,
    )

    with get_client(sync_client=True) as client:
        try:
            response = client.increment_concurrency_slots_with_lease(
                names=[name], slots=1, mode="concurrency", lease_duration=LEASE_S
            )
        except httpx.HTTPStatusError as error:
            if error.response.status_code == httpx.codes.LOCKED:
                return None
            raise
    taken = ConcurrencyLimitWithLeaseResponse.model_validate(response.json())
    if not taken.limits:  # pragma: no cover - ensure_slot created it just before
        raise ClusterError(f"the Prefect concurrency limit {name!r} does not exist")
    return taken.lease_id


def _run_id() -> str | None:
    from prefect.runtime import flow_run  # noqa: PLC0415

    run = flow_run.id
    return str(run) if run else None
