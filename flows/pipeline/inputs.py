"""What a qualification runs on, loaded and checked once: release, previous, cluster, suite.

`sparkgate qualify` builds these before anything starts (bad input exits 2, nothing run), shows
them as a plan with `--plan`, and hands them to the flow it runs in this process
(`given_inputs`); a deployment's run, which has only the file names, loads them in the flow.
Either way each file is read and checked once per process, the release's fit on the cluster's
runtime (`check_fits`) included, and every stage reads the same objects.
"""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from flows.cluster.runtime.factory import check_fits
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release, load_previous, load_release
from flows.spec.suite import Suite
from flows.spec.suites import load_suites


class QualificationInputs(BaseModel):
    """A release, its previous release and a cluster, loaded, validated and checked to fit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    release_file: Path = Field(description="The release file, as given.")
    cluster_file: Path = Field(description="The cluster file, as given.")
    release: Release
    previous: Release | None = Field(description="The previous release the release names.")
    cluster: Cluster
    suite: Suite | None = Field(description="The benchmark's suite (None: benchmark off).")

    @property
    def shape(self) -> str:
        """The cluster shape: records, outputs and speed compare only within one."""
        return self.cluster.shape


def load_inputs(release_file: Path, cluster_file: Path) -> QualificationInputs:
    """Load and check everything a qualification reads from files (SpecError: exit 2)."""
    release = load_release(release_file)
    cluster = load_model(cluster_file, Cluster)
    check_fits(cluster, release)
    benchmark = release.gates.benchmark
    return QualificationInputs(
        release_file=release_file,
        cluster_file=cluster_file,
        release=release,
        previous=load_previous(release_file, release),
        cluster=cluster,
        suite=load_suites(benchmark.suites()) if benchmark.enabled else None,
    )


given_inputs: ContextVar[QualificationInputs | None] = ContextVar("given_inputs", default=None)
"""The inputs the command built, for the flow it runs in this process."""


def inputs_for(release_file: Path, cluster_file: Path) -> QualificationInputs:
    """The inputs the command built for these files, else loaded now (a deployment's run)."""
    given = given_inputs.get()
    files = (release_file.resolve(), cluster_file.resolve())
    if given is not None and (given.release_file.resolve(), given.cluster_file.resolve()) == files:
        return given
    return load_inputs(release_file, cluster_file)
