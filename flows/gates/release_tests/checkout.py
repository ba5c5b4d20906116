"""Which classification a release-tests run uses: sparkgate's file beside the release, or the
one the operator's checkout holds on the head.

Since r6u the recipe classifies its own tests in `config/release-tests.json` in its checkout
(the release thread, r6v post "Testing: what proves a release"); a copy kept beside the
release goes stale the day the recipe adds a test. With `checkout_classification` the file is
read from the head's workdir at every run and kept in the gate's raw files with its checksum,
so the record shows which classification judged the release. The file must be in sparkgate's
release-tests schema (JSON or YAML): the recipe's own format is not published.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath

from flows.cluster.transport.base import Transport
from flows.errors import SpecError
from flows.fileio import sha256_file
from flows.gates.files import GateFiles
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import ReleaseTestsGate
from flows.spec.release_tests import ReleaseTests

COPY_FOLDER = "checkout-classification"


def checkout_path(cluster: Cluster, settings: ReleaseTestsGate) -> str | None:
    """Where the checkout's classification is on the head, or None when the release's own
    file is used (pure)."""
    if settings.checkout_classification is None:
        return None
    return str(PurePosixPath(cluster.head.workdir) / settings.checkout_classification)


def classification_for(
    cluster: Cluster,
    settings: ReleaseTestsGate,
    transports: Mapping[str, Transport],
    files: GateFiles,
) -> ReleaseTests:
    """The classification the run uses; SpecError naming the head's file when the checkout
    lacks it or it is not a valid classification (an unclassified file still fails the gate)."""
    remote = checkout_path(cluster, settings)
    if remote is None:
        return load_model(settings.classification, ReleaseTests)
    head = cluster.head.name
    transport = transports[head]
    if not transport.run(["test", "-f", remote], timeout=30).ok:
        raise SpecError(
            "no such file in the operator's checkout on the head",
            file=f"{head}:{remote}",
            key="gates.release_tests.checkout_classification",
            expected="the recipe's classification (release-tests schema, JSON or YAML)",
        )
    copy = files.path(f"{COPY_FOLDER}/{PurePosixPath(remote).name}")
    transport.get(remote, copy)
    files.write_text(f"{COPY_FOLDER}/source.txt", f"{head}:{remote} sha256:{sha256_file(copy)}\n")
    try:
        return load_model(copy, ReleaseTests)
    except SpecError as error:
        raise SpecError(f"{head}:{remote} (kept as {copy}): {error}") from error
