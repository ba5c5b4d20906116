"""What a qualification runs on, loaded and checked once: release, previous, cluster, suite.

`sparkgate qualify` builds these before anything starts (bad input exits 2, nothing run), shows
them as a plan with `--plan`, and hands them to the flow it runs in this process
(`given_inputs`); a deployment's run, which has only the file names, loads them in the flow.
Either way each file is read and checked once per process, the release's fit on the cluster's
runtime (`check_fits`) included, and every stage reads the same objects.
"""

from __future__ import annotations

import statistics
from contextvars import ContextVar
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from flows.cluster.probes.layers import with_layers_on
from flows.cluster.runtime.factory import check_fits
from flows.spec.cluster import Cluster
from flows.spec.host import check_layers
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


def benchmark_resolution(inputs: QualificationInputs, experiments: Path) -> list[str]:
    """What the cluster's A/A ledger lets the benchmark resolve, as lines to show before the run.

    Raises:
        SpecError: a tolerance the cluster cannot resolve within max_arms (exit 2), naming the
            file and key it came from and the remedies, before anything starts.
    """
    from flows.gates.benchmark.resolution import (  # noqa: PLC0415 - records are read only here
        cluster_resolution,
        refusal,
        resolution_lines,
    )
    from flows.record.aa_ledger import ledger_from_records  # noqa: PLC0415

    settings = inputs.release.gates.benchmark
    if inputs.suite is None or inputs.previous is None:
        return []
    ledger = ledger_from_records(experiments, inputs.shape, inputs.suite.name)
    resolution = cluster_resolution(settings, inputs.suite, ledger)
    problem = refusal(
        resolution, inputs.release_file, settings,
        arm_seconds(experiments, inputs.shape) if resolution else None,
    )  # fmt: skip
    if problem is not None:
        raise problem
    return resolution_lines(resolution, inputs.shape, inputs.suite.name)


def arm_seconds(experiments: Path, shape: str) -> float | None:
    """Median seconds per arm of the benchmark and calibration stages recorded on this shape."""
    from flows.record.aa_ledger import CALIBRATION_DIR, GAP_STAGES  # noqa: PLC0415
    from flows.record.reader import list_records  # noqa: PLC0415

    records = [*list_records(experiments), *list_records(experiments / CALIBRATION_DIR)]
    per_arm = []
    for record in records:
        if record.cluster.get("shape") != shape:
            continue
        for stage in GAP_STAGES:
            entry = record.stages.get(stage)
            arms = sum(f.path.endswith("/arm.json") for f in entry.files) if entry else 0
            if entry is not None and arms:
                per_arm.append(entry.seconds / arms)
    return statistics.median(per_arm) if per_arm else None


def load_inputs(release_file: Path, cluster_file: Path) -> QualificationInputs:
    """Load and check everything a qualification reads from files (SpecError: exit 2)."""
    release = load_release(release_file)
    cluster = load_model(cluster_file, Cluster)
    check_fits(cluster, release, release_file, cluster_file)
    check_layers(release_file, release.host, {fact.name for fact in cluster.probes.facts})
    # layers already on the nodes: preflight and the record expect the layers' facts
    cluster = with_layers_on(cluster, [layer for layer in release.host if not layer.reversible])
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
