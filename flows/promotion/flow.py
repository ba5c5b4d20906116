"""Promotion as a Prefect flow, so a deployment (or the nightly flow) can promote a release."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.promotion.promote import promote_release


@flow(name="promote-release", validate_parameters=False)
def promote_flow(  # noqa: PLR0917 - the flow's parameters, as a deployment passes them
    release_file: str,
    by: str,
    reason: str = "",
    cluster_file: str | None = None,
    cluster: str | None = None,
    accept_inconclusive: str = "",
) -> dict[str, Any]:
    """The promotion as a Prefect flow (for deployments): promote on a cluster, maybe deploy.

    With `cluster_file` that cluster's pointer moves and the release is deployed there; with
    only `cluster` (a name) that cluster's pointer moves; with neither, the default cluster's.
    A record whose benchmark was inconclusive needs `accept_inconclusive`, a person's reason.
    """
    pointer = promote_release(
        release_file, by=by, reason=reason, cluster=cluster, cluster_file=cluster_file,
        accept_inconclusive=accept_inconclusive,
    )  # fmt: skip
    return dict(pointer.model_dump(mode="json"))
