"""`sparkgate validate`, `schema` and `render`: check spec files, export schemas, show launches.

These commands run nothing on a cluster: they are how a person (or CI) learns that a release and
a cluster are well-formed and sees exactly what would be launched on every rank.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from flows.errors import InvalidSpecFilesError, SpecError
from flows.names import cluster_path, release_path
from flows.secrets import Secrets
from flows.spec.cluster import Cluster
from flows.spec.kinds import load_spec
from flows.spec.launch import LaunchPlan, render_all, spec_secrets
from flows.spec.load import load_model, located
from flows.spec.release import Release
from flows.ui.console import err_console, out_console

DEFAULT_CLUSTER = "local"


def register(app: typer.Typer) -> None:
    """Attach validate, schema and render to the root app."""
    app.command("validate")(validate)
    app.command("schema")(schema)
    app.command("render")(render)


def spec_files(paths: list[Path]) -> list[Path]:
    """Files to check: each file given, and every *.yaml under each directory given."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*.yaml") if p.is_file()))
        else:
            found.append(path)
    return found


def validate(
    paths: Annotated[
        list[Path], typer.Argument(help="Spec files or directories (recursing *.yaml).")
    ],
) -> None:
    """Check spec files of every kind; exit 0 when all are valid, 2 otherwise."""
    failed = 0
    files = spec_files(paths)
    for path in files:
        try:
            model = load_spec(path)
        except SpecError as error:
            failed += 1
            _line(error.render())
            continue
        if model is None:
            _line(f"{path}: skipped (no model for its kind in this checkout)")
        else:
            _line(f"{path}: ok ({getattr(model, 'kind', '?')})")
    if failed:
        raise InvalidSpecFilesError(failed, len(files))


def _line(text: str) -> None:
    err_console.print(text, markup=False, highlight=False, soft_wrap=True)


def schema(
    out: Annotated[Path, typer.Option("--out", help="Directory for the schemas.")] = Path(
        "config/schema"
    ),
) -> None:
    """Write a JSON Schema per spec kind (<kind>.schema.json) for editors."""
    from flows.spec.schema import write_schemas  # noqa: PLC0415 - only this command needs it

    for path in write_schemas(out):
        _line(f"wrote {path}")


def render(
    release_ref: Annotated[
        str, typer.Argument(metavar="RELEASE", help="Release name (r2) or file.")
    ],
    cluster_ref: Annotated[
        str, typer.Option("--cluster", "-c", help="Cluster name (local) or file.")
    ] = DEFAULT_CLUSTER,
    node: Annotated[str | None, typer.Option("--node", "-n", help="Only this node.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Machine-readable output on stdout.")
    ] = False,
    show_secrets: Annotated[
        bool,
        typer.Option("--show-secrets", help="Print secret values instead of <redacted>."),
    ] = False,
) -> None:
    """Show the resolved release, cluster and each rank's launch plan (secrets redacted)."""
    release, cluster = release_path(release_ref), cluster_path(cluster_ref)
    release_spec = load_model(release, Release)
    cluster_spec = load_model(cluster, Cluster)
    try:
        plans = render_all(cluster_spec, release_spec)
    except SpecError as error:
        raise located(error, release) from None
    secrets = None if show_secrets else spec_secrets(cluster_spec, release_spec)
    if secrets is not None:
        plans = [plan.redacted(secrets) for plan in plans]
    if node is not None:
        plans = [plan for plan in plans if plan.node == node]
        if not plans:
            names = ", ".join(n.name for n in cluster_spec.nodes)
            raise SpecError(f"no node {node!r}", file=cluster, key="nodes", expected=names)
    if as_json:
        document = {
            "release": _dump(release_spec.model_dump(mode="json"), secrets),
            "cluster": _dump(cluster_spec.model_dump(mode="json"), secrets),
            "plans": [plan.model_dump(mode="json") for plan in plans],
        }
        out_console.print_json(json.dumps(document))
        return
    _show(release_spec, cluster_spec, plans, secrets)


def _dump(data: dict[str, object], secrets: Secrets | None) -> object:
    """A spec dump as printed: secrets redacted unless `--show-secrets` (secrets None)."""
    return data if secrets is None else secrets.spec(data)


def _show(
    release: Release, cluster: Cluster, plans: list[LaunchPlan], secrets: Secrets | None
) -> None:
    values = release.engine.options
    shown = values if secrets is None else secrets.mapping(values)
    options = ", ".join(f"{k}={v}" for k, v in shown.items()) or "-"
    outputs = release.outputs.change + (
        f" ({release.outputs.reason})" if release.outputs.reason else ""
    )
    err_console.rule(f"release {release.name}")
    err_console.print(f"previous: {release.previous or '-'}   outputs: {outputs}")
    err_console.print(f"build: {release.build.describe()}")
    err_console.print(f"options: {options}   model: {release.model.id}")
    gates = release.gates
    enabled = [name for name in type(gates).model_fields if getattr(gates, name).enabled]
    err_console.print(f"gates: {', '.join(enabled)}")
    err_console.rule(f"cluster {cluster.name}")
    err_console.print(
        f"shape: {cluster.shape}   transport: {cluster.transport.kind}   "
        f"runtime: {cluster.runtime.kind}   engine: {cluster.engine.name}"
    )
    for plan in plans:
        table = Table(title=f"rank {plan.rank} on {plan.node} ({plan.address})", show_header=False)
        table.add_row("argv", shlex.join(plan.argv))
        table.add_row("env", " ".join(f"{k}={v}" for k, v in plan.env.items()) or "-")
        table.add_row("cwd", plan.cwd)
        caches = ", ".join(
            f"{k}{'*' if k == plan.kernel_cache else ''}={v}" for k, v in plan.cache_dirs.items()
        )
        table.add_row("caches", caches)
        table.add_row("ready", plan.ready_url or "-")
        table.add_row("stop", f"{plan.stop_signal}, {plan.stop_grace_s:g} s grace")
        err_console.print(table)
