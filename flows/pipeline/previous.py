"""The previous release's record a qualification compares with: same release, same shape.

The determinism gate compares a release's outputs with the previous release's outputs. Those
differ between cluster shapes (a TP3 triangle and a TP4 ring reduce in a different order), so
only a record of the previous release on this cluster's shape counts. Without one the
comparison cannot run, and a qualification that silently skipped it would pass on less
evidence than its release file promises; so the run refuses to start and says what to do.

The benchmark's previous arms boot the previous release, and for a release whose image was made
by a command or a Dockerfile that must be the image it was qualified with, not a new build: the
recipe's build command builds whatever its checkout holds now (by then the candidate's commit),
so building the previous release again would compare the candidate with itself.
"""

from __future__ import annotations

from pathlib import Path

from flows.cluster.build.adopted_image import recorded_image
from flows.errors import MissingPreviousError
from flows.gates.base import RecordedArms
from flows.gates.determinism.kept import record_hashes
from flows.record.arms import candidate_arm_folders
from flows.record.reader import latest_record, published_shapes
from flows.spec.cluster import Cluster
from flows.spec.release import Release, previous_file


def compares_with_previous(release: Release, previous: Release | None) -> bool:
    """Whether the release's determinism gate reads the previous release's record."""
    determinism = release.gates.determinism
    return previous is not None and determinism.enabled and determinism.against_previous


def missing_previous(
    experiments: Path,
    release_file: Path,
    release: Release,
    previous: Release | None,
    cluster: Cluster,
) -> str | None:
    """Why the qualification cannot compare with its previous release, or None when it can."""
    if previous is None or not compares_with_previous(release, previous):
        return None
    newest = latest_record(experiments, previous.name, shape=cluster.shape)
    if newest is not None and record_hashes(newest) is not None:
        return None
    if newest is not None:
        return (
            f"{release.name} compares its outputs with {previous.name} on {cluster.shape}, but "
            f"{previous.name}'s newest record on that shape, {newest.name}, holds no determinism "
            f"hashes (its determinism gate did not run): qualify {previous.name} again with it on"
        )
    elsewhere = published_shapes(experiments, previous.name)
    found = f" (it has records on {', '.join(elsewhere)} only)" if elsewhere else ""
    command = f"sparkgate qualify {previous_file(release_file, previous.name)} -c {cluster.name}"
    return (
        f"{release.name} compares its outputs with {previous.name} on {cluster.shape}, and "
        f"{experiments} holds no published record of {previous.name} on that shape{found}: "
        f"qualify {previous.name} on a {cluster.shape} cluster first (`{command}`), or set "
        "gates.determinism.against_previous: false in the release"
    )


def require_previous(
    experiments: Path,
    release_file: Path,
    release: Release,
    previous: Release | None,
    cluster: Cluster,
) -> None:
    """Raise MissingPreviousError when the previous release's record on this shape is missing."""
    problem = missing_previous(experiments, release_file, release, previous, cluster)
    if problem is not None:
        raise MissingPreviousError(problem)


def as_qualified(experiments: Path, release: Release, cluster: Cluster) -> Release | None:
    """An image-made release pinned to the image its newest published record on this cluster's
    shape names; None for a source build or when no such record names an image.

    What a previous arm boots, and what a calibration of an already qualified release measures:
    the image that was qualified, not a new build of whatever the sources hold now.
    """
    if not release.build.makes_image:
        return None
    record = latest_record(experiments, release.name, shape=cluster.shape)
    return recorded_image(release, record.documents.get("build.json")) if record else None


def benchmarked_previous(
    experiments: Path,
    release_file: Path,
    release: Release,
    previous: Release | None,
    cluster: Cluster,
) -> Release | None:
    """The previous release as the benchmark's previous arms boot it.

    A source build is content-addressed and built as its file says. An image-making build boots
    the image its newest published record on this shape names (pinned by ID, never built
    again); with no such record an adopted image boots as its file names it, and a command or
    Dockerfile build, which would build something new, is refused (MissingPreviousError).
    """
    if previous is None or not release.gates.benchmark.enabled or not previous.build.makes_image:
        return previous
    pinned = as_qualified(experiments, previous, cluster)
    if pinned is not None or previous.build.kind == "image":
        return pinned or previous
    command = f"sparkgate qualify {previous_file(release_file, previous.name)} -c {cluster.name}"
    raise MissingPreviousError(
        f"{release.name}'s benchmark boots {previous.name} as it was qualified, and "
        f"{experiments} holds no published record of {previous.name} on {cluster.shape} naming "
        f"its image; building it again ({previous.build.kind} build) would make a new image from "
        f"what its sources hold now: qualify {previous.name} on a {cluster.shape} cluster first "
        f"(`{command}`), or make {previous.name}'s release file adopt its image (build.kind: "
        "image, with its tag and image_id)"
    )


def recorded_arms(experiments: Path, previous: str, shape: str) -> RecordedArms | None:
    """The previous release's own (candidate) arms of its newest published record on `shape`,
    each still as saved (disturbed arms aside): what an irreversible host change is compared
    with."""
    found = latest_record(experiments, previous, shape=shape)
    if found is None:
        return None
    folders = candidate_arm_folders(found)
    return RecordedArms(found.name, folders) if folders else None


def require_recorded_arms(
    experiments: Path, release_file: Path, release: Release, cluster: Cluster
) -> None:
    """MissingPreviousError before anything starts when an irreversible host change has no
    recorded arms of its previous release on this shape to be compared with."""
    benchmark = release.gates.benchmark
    if release.previous is None or not benchmark.enabled:
        return
    if all(layer.reversible for layer in release.host):
        return
    if recorded_arms(experiments, release.previous, cluster.shape) is not None:
        return
    command = f"sparkgate qualify {previous_file(release_file, release.previous)} -c {cluster.name}"
    raise MissingPreviousError(
        f"{release.name} changes the hosts irreversibly, so its benchmark compares its arms with "
        f"{release.previous}'s arms of its newest published record on {cluster.shape}, and "
        f"{experiments} holds none with benchmark arms: qualify {release.previous} on this shape "
        f"before the change (`{command}`)"
    )
