"""Entrypoints of the deployments in prefect.yaml: plain parameters, validated before any work.

A scheduled run has no terminal to print a spec error to, so the parameters are typed (Prefect
validates them against the deployment's schema when a run is created, and again here) and the
spec files are loaded before the cluster is touched: a misspelt release name fails the run at
once with a SpecError naming the file and key. Releases and clusters are given by name (looked
up in releases/ and config/ of the project, SPARKGATE_ROOT or the worker's working directory);
a run's parameters are names only (flows.pipeline.schedule.SpecName), and any file found must
lie inside the project.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from prefect import flow
from prefect.client.schemas.objects import State
from prefect.states import Failed
from pydantic import Field

from flows.errors import SparkgateError, SpecError
from flows.pipeline.notify import NIGHTLY_FAILED
from flows.pipeline.qualify import QualifyOutcome, qualify_flow
from flows.pipeline.run_label import label_current_run, run_tags, run_title
from flows.pipeline.schedule import SpecName
from flows.promotion.flow import promote_flow
from flows.settings import project_root

Name = SpecName


def resolve_spec(ref: str, folder: str) -> Path:
    """A spec file from a deployment parameter: a path, or a name in the project's folder."""
    given, root = Path(ref), project_root()
    named = [root / folder / f"{ref}.yaml", root / given]
    candidates = [given] if given.is_absolute() else named
    for candidate in candidates:
        if candidate.is_file() and candidate.resolve().is_relative_to(root):
            return candidate.resolve()
    tried = ", ".join(str(c) for c in candidates)
    raise SpecError(f"{ref!r}: no such file (tried {tried})", key=folder, expected="a spec file")


@flow(name="nightly-qualification", validate_parameters=True)
def nightly_qualification(
    release: Name, cluster: Name = "local", fresh: bool = False, wait: bool = False
) -> QualifyOutcome | State[Any]:
    """Qualify a named release on a named cluster: the scheduled deployment's flow.

    By default a passing release ends "qualified, awaiting promotion" and the promotion
    deployment (or `sparkgate promote`) decides later; `wait=True` pauses for the UI's form.
    The run is named and tagged like a qualification (`nightly qualify r2 on local (tp2-local)`,
    `release:`, `previous:`, `cluster:`, `shape:`); a name that loads no spec ends it Failed
    with one line naming the file and key (announced by `sparkgate notify`'s automation).
    """
    from flows.spec.cluster import Cluster  # noqa: PLC0415
    from flows.spec.load import load_model  # noqa: PLC0415
    from flows.spec.release import load_previous, load_release  # noqa: PLC0415

    label_current_run(f"nightly qualify {release} on {cluster}", nightly_tags(release, cluster))
    try:
        release_file = resolve_spec(release, "releases")
        cluster_file = resolve_spec(cluster, "config")
        chosen = load_release(release_file)
        previous = load_previous(release_file, chosen)
        target = load_model(cluster_file, Cluster)
    except SparkgateError as error:  # one line in the run's state, the notification and the UI
        said = "; ".join(str(error).splitlines())
        return Failed(message=f"{NIGHTLY_FAILED} {release} on {cluster}: {said}")
    title = run_title("nightly qualify", chosen, target)
    label_current_run(title, run_tags(chosen, previous, target))
    # Called as a subflow, a qualification that ends Failed would raise, and this run would end
    # "encountered an exception: FailedRun: ..."; it ends Failed with the same one line instead
    # (not announced twice: the automation announces the qualification's run).
    ended = qualify_flow(str(release_file), str(cluster_file), fresh, wait, return_state=True)
    if ended.is_failed() or ended.is_crashed():
        return Failed(message=ended.message or f"{title}: {ended.name}")
    return ended.result()


def nightly_tags(release: str, cluster: str) -> list[str]:
    """The tags a nightly run has before its specs load: the names it was given."""
    return [f"release:{release}", f"cluster:{cluster}"]


@flow(name="promotion", validate_parameters=True)
def promotion(  # noqa: PLR0917 - a deployment's parameters, as the run form shows them
    release: Name,
    by: Annotated[str, Field(min_length=1)],
    reason: Annotated[str, Field(min_length=1)],
    cluster: Name | None = None,
    deploy: bool = True,
    accept_inconclusive: str = "",
) -> dict[str, Any]:
    """Promote a qualified release on one cluster (refused unless its record passed every gate).

    Only that cluster's pointer moves: `cluster`'s, or the default cluster's (`local`) without
    one. With a cluster and `deploy` (the default), the promoted release is also deployed there
    and rolled back on failure; `deploy=False` only moves the pointer. A record whose benchmark
    was inconclusive (a nightly run that ended `Inconclusive`) is promoted only with
    `accept_inconclusive`, the reason kept in the promotions log beside `by`.
    """
    from flows.spec.cluster import Cluster  # noqa: PLC0415
    from flows.spec.load import load_model  # noqa: PLC0415

    release_file = resolve_spec(release, "releases")
    name, target = None, None
    if cluster is not None:
        cluster_file = resolve_spec(cluster, "config")
        name = load_model(cluster_file, Cluster).name  # a bad cluster file fails before anything
        target = str(cluster_file) if deploy else None
    result: dict[str, Any] = promote_flow(
        str(release_file), by, reason, target, name, accept_inconclusive
    )
    return result
