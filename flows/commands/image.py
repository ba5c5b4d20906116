"""`sparkgate image build`: make a release's engine image once and put it on every node.

The cluster's runtime does it, as a qualification's build and distribute stages do (its `build`,
then its `install`), for every build kind: a source tree is built into an image on the head's
daemon, an adopted image is looked up on its node's daemon, the operator's command is run on its
build node and the image it made adopted, a Dockerfile is built on its daemon. Every other node
then receives the image by a streamed save -> load and must end up with the same image ID. A
process cluster runs a wheel, not an image: it is refused before anything starts. This command
lets an operator do it by hand and see the bars.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from flows.commands.cluster import ClusterOption, JsonOption, cluster_path
from flows.errors import ClusterError, SpecError
from flows.settings import state_dir
from flows.spec.cluster import Cluster, DockerRuntime
from flows.ui.console import err_console, out_console

if TYPE_CHECKING:
    from flows.cluster.build.progress import ImageProgress
    from flows.cluster.build.release_image import InstalledImage
    from flows.spec.release import Release

image_app = typer.Typer(
    name="image", help="Build and distribute release images (docker runtime).", no_args_is_help=True
)


@image_app.command("build")
def build(
    release: Annotated[str, typer.Argument(help="Release file, e.g. releases/r1.yaml.")],
    cluster: ClusterOption = "lab",
    as_json: JsonOption = False,
) -> None:
    """Build (or adopt) RELEASE's image, load it on every node, verify one image ID."""
    from flows.cluster.build.progress import RichImageProgress  # noqa: PLC0415
    from flows.cluster.runtime.factory import check_fits  # noqa: PLC0415
    from flows.names import release_path  # noqa: PLC0415
    from flows.spec.load import load_model, located  # noqa: PLC0415
    from flows.spec.release import Release  # noqa: PLC0415

    cluster_file, release_file = cluster_path(cluster), release_path(release)
    spec = load_model(cluster_file, Cluster)
    chosen = load_model(release_file, Release)
    try:
        refuse_without_image(spec, cluster_file, chosen)
        check_fits(spec, chosen, release_file, cluster_file)
        with RichImageProgress(err_console) as progress:
            result = installed_image(spec, chosen, progress)
    except SpecError as error:  # a build's own error knows its key, not the file that set it
        raise located(error, release_file, cluster_file) from None
    if as_json:
        out_console.print_json(result.model_dump_json())
        return
    table = Table(title=f"{result.built.tag} ({result.verb})")
    for column in ("node", "image id", "match", "layers"):
        table.add_column(column)
    for node in result.nodes:
        facts = node.facts
        table.add_row(facts.node, facts.image_id[:19], node.match, str(len(facts.layers)))
    err_console.print(table)
    timings = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result.seconds.items())
    err_console.print(f"[green]same image on {len(result.nodes)} nodes[/] ({timings})")


def refuse_without_image(cluster: Cluster, cluster_file: Path, release: Release) -> None:
    """SpecError (exit 2) unless the cluster runs images: a process cluster installs a wheel
    built from the release's source tree, and cannot run an adopted or operator-built image."""
    if isinstance(cluster.runtime, DockerRuntime):  # docker, or the operator's launcher
        return
    raise SpecError(
        f"cluster {cluster.name} ({cluster_file}) runs ranks as processes: there is no image of "
        f"release {release.name} (a {release.build.kind} build) to build or load there",
        key="build.kind",
        expected="a cluster with runtime.kind docker or operator",
    )


def installed_image(cluster: Cluster, release: Release, progress: ImageProgress) -> InstalledImage:
    """The cluster's runtime builds (or adopts) the release's image and installs it everywhere."""
    from flows.cluster.build.release_image import ImageBuild, InstalledImage  # noqa: PLC0415
    from flows.cluster.ops.lock import ClusterLock, lock_settings  # noqa: PLC0415
    from flows.cluster.runtime.factory import runtime_for  # noqa: PLC0415
    from flows.cluster.transport.factory import TransportPool  # noqa: PLC0415

    def say(line: str) -> None:
        err_console.print(escape(line))

    # Under the cluster lock, as a qualification's build is: a second build of the same tag on
    # the head, or a build beside a qualification's boots, would race it.
    with TransportPool(cluster) as pool, ClusterLock(pool.head, lock_settings(cluster)):
        transports = {node.name: pool.node(node.name) for node in cluster.nodes}
        runtime = runtime_for(cluster, transports, state_dir(), release=release, progress=progress)
        made = runtime.build(release, say)
        if not isinstance(made, ImageBuild):
            raise ClusterError(f"cluster {cluster.name}: its runtime built no image")
        started = time.monotonic()
        installed = runtime.install(made, say)
        distributed = time.monotonic() - started
    return InstalledImage(
        built=made.built, base_image=made.base_image, lock_digest=made.lock_digest,
        nodes=tuple(node.verified for node in installed.nodes if node.verified is not None),
        seconds={**made.seconds, "distribute": distributed},
        release=release.name, cluster=cluster.name, runtime=installed.runtime,
        origin=made.origin, verb=made.verb, built_on=made.built_on,
        summary=tuple(installed.summary),
    )  # fmt: skip


def register(app: typer.Typer) -> None:
    """Attach `sparkgate image ...` to the root app."""
    app.add_typer(image_app)
