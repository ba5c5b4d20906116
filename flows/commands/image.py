"""`sparkgate image build`: build a release's engine image once and put it on every node.

The build runs on the head node's Docker daemon; every other node receives the image by a
streamed save -> load and must end up with the same image ID. The qualification flow runs the
same function as its build stage; this command lets an operator do it by hand and see the bars.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from flows.commands.cluster import ClusterOption, JsonOption, load_cluster
from flows.ui.console import err_console, out_console

image_app = typer.Typer(
    name="image", help="Build and distribute release images (docker runtime).", no_args_is_help=True
)


@image_app.command("build")
def build(
    release: Annotated[str, typer.Argument(help="Release file, e.g. releases/r1.yaml.")],
    cluster: ClusterOption = "lab",
    as_json: JsonOption = False,
) -> None:
    """Build RELEASE's image on the head node, load it on every node, verify one image ID."""
    from flows.cluster.build.progress import RichImageProgress  # noqa: PLC0415
    from flows.cluster.build.release_image import build_and_distribute  # noqa: PLC0415
    from flows.names import release_path  # noqa: PLC0415
    from flows.settings import state_dir  # noqa: PLC0415
    from flows.spec.load import load_model  # noqa: PLC0415
    from flows.spec.release import Release  # noqa: PLC0415

    spec = load_cluster(cluster)
    chosen = load_model(release_path(release), Release)
    with RichImageProgress(err_console) as progress:
        result = build_and_distribute(spec, chosen, state_dir(), progress)
    if as_json:
        out_console.print_json(result.model_dump_json())
        return
    table = Table(title=f"{result.built.tag} ({'reused' if result.built.reused else 'built'})")
    for column in ("node", "image id", "match", "layers"):
        table.add_column(column)
    for node in result.nodes:
        facts = node.facts
        table.add_row(facts.node, facts.image_id[:19], node.match, str(len(facts.layers)))
    err_console.print(table)
    timings = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result.seconds.items())
    err_console.print(f"[green]same image on {len(result.nodes)} nodes[/] ({timings})")


def register(app: typer.Typer) -> None:
    """Attach `sparkgate image ...` to the root app."""
    app.add_typer(image_app)
