"""Flow runs that say what they are: a name and tags naming the release, cluster and shape.

Prefect names runs at random ("exuberant-partridge"); in its UI a reviewer needs "qualify r2 on
local (tp2-local)" and tags to filter by (release, previous, cluster, shape). The flow sets both
on its own run as it starts, so a run from the command line, a deployment or a schedule is
labelled alike. The words are pure; `label_current_run` is the one call to Prefect.
"""

from __future__ import annotations

from flows.spec.cluster import Cluster
from flows.spec.release import Release


def run_title(verb: str, release: Release, cluster: Cluster) -> str:
    """E.g. `qualify r2 on local (tp2-local)`."""
    return f"{verb} {release.name} on {cluster.name} ({cluster.shape})"


def run_tags(release: Release, previous: Release | None, cluster: Cluster) -> list[str]:
    """Tags a runs list can be filtered by."""
    return [
        f"release:{release.name}",
        f"previous:{previous.name if previous else 'none'}",
        f"cluster:{cluster.name}",
        f"shape:{cluster.shape}",
    ]


def label_current_run(title: str, tags: list[str]) -> None:
    """Rename the running flow run and add the tags (nothing outside a flow run)."""
    from prefect.client.orchestration import get_client  # noqa: PLC0415 - Prefect only here
    from prefect.context import FlowRunContext  # noqa: PLC0415

    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return
    run = context.flow_run
    with get_client(sync_client=True) as client:
        client.update_flow_run(run.id, name=title, tags=sorted({*run.tags, *tags}))
