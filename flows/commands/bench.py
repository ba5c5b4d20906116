"""`sparkgate bench ...`: run one arm, import recipe reports, compare arms, grow the A/A ledger.

Thin commands: parse, call one library function, render. Tables go to stderr, `--json` to
stdout. `bench compare` exits 0 when every point passes, 1 on a regression and 3 when a point
is inconclusive (never a pass: add arms or ledger entries and compare again).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flows.bounded_read import is_file
from flows.errors import GateFailedError, InconclusiveError, SpecError
from flows.names import looks_like_path
from flows.ui.console import err_console, out_console

if TYPE_CHECKING:
    from flows.bench.cross import CrossCluster
    from flows.bench.hosts import HostFacts
    from flows.bench.report import ArmReport
    from flows.engine_api.endpoint import Endpoint

CROSS_FILE = "cross-cluster.json"
"""What `bench compare --out` writes when a side carries host facts."""
DRAFT_KEYS = ("spec_drafts", "spec_accepted_tokens")
"""Profile keys of the draft counters, read where an engine profile names them."""
EngineProfileOption = Annotated[
    Path | None, typer.Option(help="engine profile YAML whose metric names to use")
]
"""`--engine`, taken by every command that measures a live endpoint."""
ApiKeyOption = Annotated[str | None, typer.Option(envvar="SPARKGATE_API_KEY", help="bearer token")]
"""`--api-key`, likewise."""

bench_app = typer.Typer(help="Benchmark arms: run, import, compare.", no_args_is_help=True)


def _load_arm(path: Path) -> ArmReport:
    """An arm report, a recipe bench.json imported on the fly, or the report a recipe release
    manifest names (with the manifest's host facts)."""
    from flows.bench.legacy import (  # noqa: PLC0415
        RECIPE_SCHEMA,
        import_recipe_manifest,
        import_recipe_report,
        is_recipe_manifest,
    )
    from flows.bench.report import read_arm  # noqa: PLC0415

    if is_file(path):
        try:
            head = json.loads(path.read_text())
        except (ValueError, RecursionError):  # not JSON: read_arm says so, exit 2
            head = None
        if isinstance(head, dict) and head.get("schema") == RECIPE_SCHEMA:
            return import_recipe_report(path)
        if is_recipe_manifest(head):
            return import_recipe_manifest(path)
    return read_arm(path)


def _load_side(path: Path, experiments: Path | None) -> list[ArmReport]:
    """OLD as given: an arm (or recipe report or manifest), or a record, by folder or name,
    whose candidate arms stand for the published release."""
    from flows.record.arms import candidate_arms  # noqa: PLC0415
    from flows.record.model import RECORD_FILE  # noqa: PLC0415
    from flows.record.reader import find_record  # noqa: PLC0415
    from flows.settings import project_root  # noqa: PLC0415

    if (path / RECORD_FILE).is_file():
        return candidate_arms(path)
    if not path.exists() and not looks_like_path(str(path)):
        folder = find_record(experiments or project_root() / "experiments", str(path))
        return candidate_arms(folder)
    return [_load_arm(path)]


def suite_path(option: str) -> Path:
    """--suite: an existing YAML file, else config/suites/NAME.yaml of the project."""
    from flows.settings import project_root  # noqa: PLC0415

    given = Path(option)
    if given.suffix in (".yaml", ".yml"):
        return given
    return project_root() / "config" / "suites" / f"{option}.yaml"


def _endpoint(url: str, engine: Path | None, api_key: str | None) -> Endpoint:
    """The endpoint with the metric names of an engine profile (the bundled engine's if none):
    the ones every arm needs, and the optional ones (prefix cache, drafts) where named."""
    from flows.engine_api.endpoint import DEFAULT_METRICS, Endpoint  # noqa: PLC0415
    from flows.engine_api.metrics import OPTIONAL_METRICS, scrape_names  # noqa: PLC0415

    if engine is None:
        return Endpoint(url, api_key=api_key)
    from flows.spec.engine import EngineProfile  # noqa: PLC0415
    from flows.spec.load import load_model  # noqa: PLC0415

    profile = load_model(engine, EngineProfile).metrics
    wanted = profile.model_dump(exclude={"path"})
    names = {k: wanted[k] for k in DEFAULT_METRICS if isinstance(wanted.get(k), str)}
    optional = scrape_names({k: wanted.get(k) for k in (*OPTIONAL_METRICS, *DRAFT_KEYS)})
    return Endpoint(
        url,
        api_key=api_key,
        metric_names=names,
        metrics_path=profile.path,
        optional_names=optional,
    )


def _host_facts(cluster: str | None, facts: Path | None) -> HostFacts | None:
    """The host facts an arm keeps: read now on the cluster's nodes (its `probes.facts`, no
    other preflight check, so a serving cluster can be read), or from a file."""
    from flows.bench.hosts import read_host_facts  # noqa: PLC0415

    if cluster is not None and facts is not None:
        raise SpecError("give --cluster or --facts, not both", key="--facts")
    if facts is not None:
        return read_host_facts(facts)
    if cluster is None:
        return None
    from datetime import UTC, datetime  # noqa: PLC0415

    from flows.bench.hosts import HostFacts  # noqa: PLC0415
    from flows.cluster.ops.preflight import read_host_facts as read_on_nodes  # noqa: PLC0415
    from flows.cluster.transport.factory import TransportPool  # noqa: PLC0415
    from flows.commands.cluster import load_cluster  # noqa: PLC0415
    from flows.names import cluster_path  # noqa: PLC0415

    spec = load_cluster(cluster)
    if not spec.probes.facts:
        raise SpecError(
            "declares no host facts to read",
            file=cluster_path(cluster),
            key="probes.facts",
            expected="at least one fact, as config/local.yaml has",
        )
    with TransportPool(spec) as pool:
        values, errors = read_on_nodes(spec, lambda node: pool.node(node.name))
    host = HostFacts(
        cluster=spec.name,
        source=f"probes.facts of {spec.name}",
        read_utc=datetime.now(UTC).isoformat(timespec="seconds"),
        nodes=values,
        errors=errors,
    )
    unread = sum(len(e) for e in errors.values())
    err_console.print(
        f"host facts of {spec.name}: {len(spec.probes.facts)} on {len(values)} node(s)"
        + (f", {unread} unread" if unread else ""),
        markup=False,
    )
    return host


@bench_app.command("run")
def run_command(  # noqa: PLR0917 - typer maps parameters to options
    url: Annotated[str, typer.Argument(help="base URL of an OpenAI-compatible endpoint")],
    suite: Annotated[str, typer.Option("--suite", help="suite file or config/suites name")],
    out: Annotated[Path, typer.Option("--out", help="directory to write arm.json into")],
    label: Annotated[str, typer.Option(help="arm label, e.g. the release name")] = "arm",
    engine: EngineProfileOption = None,
    api_key: ApiKeyOption = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster", "-c", help="read this cluster's host facts (probes.facts) into the arm"
        ),
    ] = None,
    facts: Annotated[
        Path | None,
        typer.Option(help="host facts for the arm: host-facts.json, a record, a recipe manifest"),
    ] = None,
) -> None:
    """Run one arm of a suite against a live endpoint and write its receipts (and, with -c or
    --facts, the host facts of the cluster it measured, for `bench compare` across clusters)."""
    from flows.bench.report import write_arm  # noqa: PLC0415
    from flows.bench.runner import run_arm  # noqa: PLC0415
    from flows.spec.load import load_model  # noqa: PLC0415
    from flows.spec.suite import Suite  # noqa: PLC0415

    spec = load_model(suite_path(suite), Suite)
    endpoint = _endpoint(url, engine, api_key)
    host = _host_facts(cluster, facts)
    arm = run_arm(
        endpoint,
        spec,
        label=label,
        say=lambda line: err_console.print(line, markup=False),
        checkpoint=lambda partial: write_arm(partial.model_copy(update={"host_facts": host}), out),
    )
    path = write_arm(arm.model_copy(update={"host_facts": host}), out)
    receipts = sum(len(s.receipts) for p in arm.points.values() for s in p.samples)
    client = arm.client
    cost = (
        f"; client {client.cpu_s:.2f} s CPU over {client.wall_s:.1f} s, {client.chunks} chunks"
        if client
        else ""
    )
    err_console.print(f"{len(arm.points)} points, {receipts} receipts{cost} -> {path}")


@bench_app.command("show")
def show_command(
    arm: Annotated[Path, typer.Argument(help="arm.json, its folder, or a recipe bench.json")],
) -> None:
    """Print one arm's points: mean, 95 % interval and n of every gated metric."""
    from flows.bench.present import arm_table  # noqa: PLC0415

    report = _load_arm(arm)
    err_console.print(arm_table(report))
    if report.aborted:
        err_console.print(f"ABORTED: {report.aborted}", markup=False)
    client = report.client
    if client is not None:
        err_console.print(
            f"client: {client.processes} process(es), {client.chunks} chunks, "
            f"{client.cpu_s:.2f} s CPU in {client.wall_s:.1f} s, "
            f"{client.cpu_us_per_chunk or 0:.0f} us CPU/chunk, parse lag p99 "
            f"{client.parse_lag_p99_ms or 0:.2f} ms, "
            f"loop lag p99 {client.loop_lag_p99_ms or 0:.1f} ms"
        )
    if report.discarded:
        err_console.print(f"{len(report.discarded)} sample(s) repeated for foreign traffic")


@bench_app.command("import")
def import_command(
    report: Annotated[Path, typer.Argument(help="a recipe `bin/spark bench` bench.json")],
    out: Annotated[Path, typer.Option("--out", help="directory to write arm.json into")],
    label: Annotated[str | None, typer.Option(help="arm label (default: file name)")] = None,
) -> None:
    """Import a recipe report as an arm, keeping every raw receipt."""
    from flows.bench.legacy import import_recipe_report  # noqa: PLC0415
    from flows.bench.report import write_arm  # noqa: PLC0415

    arm = import_recipe_report(report, label=label)
    path = write_arm(arm, out)
    receipts = sum(len(s.legacy_receipts) for p in arm.points.values() for s in p.samples)
    err_console.print(f"imported {len(arm.points)} points, {receipts} receipts -> {path}")


@bench_app.command("compare")
def compare_command(  # noqa: PLR0917 - typer maps parameters to options
    new: Annotated[Path, typer.Argument(help="candidate arm: arm.json, its folder, recipe json")],
    old: Annotated[list[Path], typer.Argument(help="previous-release arms in session order")],
    again: Annotated[
        list[Path] | None,
        typer.Option("--again", help="further candidate arms (C2, C3 ...) in session order"),
    ] = None,
    ledger_path: Annotated[Path | None, typer.Option("--ledger", help="A/A ledger JSON")] = None,
    tolerance: Annotated[float, typer.Option(help="practical floor in percent")] = 3.0,
    out: Annotated[
        Path | None, typer.Option(help="write compare.json, bench.txt, changes.png here")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the JSON on stdout")] = False,
    experiments: Annotated[
        Path | None,
        typer.Option("--experiments", help="folder of records an OLD record name is found in"),
    ] = None,
) -> None:
    """Compare arms C1, P1, C2, ... point by point; non-zero exit on a regression.

    OLD may also be a record (folder or name: its candidate arms) or a recipe release manifest
    (the report it names): when a side carries host facts, both sides' facts and per-step
    numbers are shown side by side, with what a comparison across clusters cannot prove."""
    from flows.bench.compare import compare_arms  # noqa: PLC0415
    from flows.bench.cross import cross_cluster  # noqa: PLC0415
    from flows.bench.ledger import Ledger, read_ledger  # noqa: PLC0415
    from flows.bench.present import comparison_table, plot_changes, recipe_text  # noqa: PLC0415

    again = again or []
    candidates = [_load_arm(p) for p in [new, *again]]
    previous = [arm for p in old for arm in _load_side(p, experiments)]
    arms = [*candidates, *previous]
    for arm in arms:
        if arm.aborted:
            err_console.print(f"warning: arm {arm.label} was aborted: {arm.aborted}", markup=False)
    ledger = read_ledger(ledger_path) if ledger_path else Ledger()
    comparison = compare_arms(candidates, previous, ledger=ledger, tolerance_pct=tolerance)
    err_console.print(comparison_table(comparison))
    text = recipe_text(comparison)
    err_console.print(text, markup=False, highlight=False, soft_wrap=True)
    for label, points in (
        ("only in the candidate", comparison.unmatched),
        ("not compared (workloads the candidate does not run)", comparison.not_compared),
    ):
        if points:
            err_console.print(f"{label}: {', '.join(points)}", markup=False)
    cross = cross_cluster(comparison, candidates, previous)
    if cross is not None:
        _print_cross(cross)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.json").write_text(comparison.model_dump_json(indent=1) + "\n")
        (out / "bench.txt").write_text(text + "\n")
        plot_changes(comparison, out / "changes.png")
        written = "compare.json, bench.txt, changes.png"
        if cross is not None:
            (out / CROSS_FILE).write_text(cross.model_dump_json(indent=1) + "\n")
            written += f", {CROSS_FILE}"
        err_console.print(f"wrote {out}/{written}")
    if as_json:
        out_console.print_json(comparison.model_dump_json())
    if comparison.failed:
        lost = [
            *comparison.missing,
            *(f"{k} ({v} failed)" for k, v in comparison.failed_requests.items()),
        ]
        raise GateFailedError(f"FAIL: the candidate lost measurements: {', '.join(lost)}")
    if comparison.regressions:
        names = ", ".join(f"{r.point} {r.metric}" for r in comparison.regressions)
        raise GateFailedError(f"FAIL: slower beyond {tolerance:g}%: {names}")
    if comparison.inconclusive:
        raise InconclusiveError(
            f"INCONCLUSIVE: {len(comparison.inconclusive)} of {len(comparison.points)} rows "
            "cannot be decided (add arms or A/A ledger entries)"
        )


def _print_cross(cross: CrossCluster) -> None:
    """Host facts side by side, per-step numbers, and what the comparison cannot prove."""
    from rich.table import Table  # noqa: PLC0415

    from flows.bench.cross import step_line  # noqa: PLC0415

    for side, title, measured in (
        ("this side", cross.new_title, cross.new_measured),
        ("other side", cross.old_title, cross.old_measured),
    ):
        line = f"{side}: {title}; {measured}"
        err_console.print(line, markup=False, highlight=False, soft_wrap=True)
    table = Table(title="host facts")
    for column in ("fact", "this side", "other side", ""):
        table.add_column(column, overflow="fold")
    for row in cross.facts:
        mark = "differs" if row.same is False else ""
        table.add_row(row.fact, row.new, row.old, mark)
    err_console.print(table)
    if cross.steps:
        err_console.print("per step (lower is less spent; within-arm Welch interval):")
        for step in cross.steps:
            err_console.print(step_line(step), markup=False, highlight=False, soft_wrap=True)
    err_console.print("what this comparison cannot prove:", markup=False)
    for line in cross.caveats:
        err_console.print(f"  - {line}", markup=False, highlight=False, soft_wrap=True)


@bench_app.command("variance")
def variance_command(
    arms: Annotated[list[Path], typer.Argument(help="arms of one session, in the order run")],
    as_json: Annotated[bool, typer.Option("--json", help="print the JSON on stdout")] = False,
) -> None:
    """Split every point's noise into within-arm, boot-to-boot and drift, with their df."""
    from flows.bench.present import variance_table  # noqa: PLC0415
    from flows.bench.variance import decompose_all, roles_of  # noqa: PLC0415

    if len(arms) < 2:
        raise SpecError("variance needs at least two arms of one session")
    reports = [_load_arm(p) for p in arms]
    rows = decompose_all(reports, roles_of(reports))
    err_console.print(variance_table(rows))
    if as_json:
        out_console.print_json(json.dumps([row.model_dump() for row in rows]))


@bench_app.command("ledger-add")
def ledger_add_command(
    first: Annotated[Path, typer.Argument(help="first arm of a release (C1)")],
    second: Annotated[Path, typer.Argument(help="second arm of the same release (C2)")],
    ledger_path: Annotated[Path, typer.Option("--ledger", help="A/A ledger JSON (created)")],
) -> None:
    """Record the gaps between two arms of the same release in the A/A ledger."""
    from flows.bench.ledger import read_ledger, write_ledger  # noqa: PLC0415

    ledger = read_ledger(ledger_path).with_session(_load_arm(first), _load_arm(second))
    write_ledger(ledger, ledger_path)
    err_console.print(f"{ledger_path}: {len(ledger.sessions)} A/A sessions")


@bench_app.command("record")
def record_command(  # noqa: PLR0917 - typer maps parameters to options
    upstream: Annotated[str, typer.Argument(help="base URL of the endpoint to record in front of")],
    out: Annotated[Path, typer.Option("--out", help="new session file (JSON Lines) to write")],
    port: Annotated[int, typer.Option(help="port the proxy listens on")] = 8001,
    host: Annotated[str, typer.Option(help="address the proxy listens on")] = "127.0.0.1",
    secret_env: Annotated[
        list[str] | None,
        typer.Option("--secret-env", help="environment variable whose value is redacted too"),
    ] = None,
    turns: Annotated[
        int | None, typer.Option(min=1, help="stop after this many turns (default: Ctrl-C)")
    ] = None,
    note: Annotated[str, typer.Option(help="what is being recorded, kept in the header")] = "",
) -> None:
    """Record a working session: a proxy that forwards to UPSTREAM and appends every exchange."""
    import os  # noqa: PLC0415

    from flows.bench.session_proxy import record_session  # noqa: PLC0415
    from flows.secrets import Secrets  # noqa: PLC0415

    names = secret_env or []
    values = tuple(os.environ[name] for name in names if os.environ.get(name))
    recorded = record_session(
        upstream,
        out,
        host=host,
        port=port,
        secrets=Secrets(frozenset(names), values),
        stop_after=turns,
        note=note,
        say=lambda line: err_console.print(line, markup=False, highlight=False),
    )
    err_console.print(f"{recorded} turns -> {out}", markup=False)


@bench_app.command("replay")
def replay_command(  # noqa: PLR0917 - typer maps parameters to options
    url: Annotated[str, typer.Argument(help="base URL of the endpoint to replay against")],
    session: Annotated[Path, typer.Argument(help="a session file from `bench record`")],
    pace: Annotated[
        str, typer.Option(help="back_to_back, or recorded (wait the recorded gaps)")
    ] = "back_to_back",
    max_gap_s: Annotated[float, typer.Option(help="longest recorded gap waited")] = 60.0,
    turns: Annotated[int | None, typer.Option(min=1, help="replay only the first N")] = None,
    engine: EngineProfileOption = None,
    api_key: ApiKeyOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the turns as JSON on stdout")
    ] = False,
) -> None:
    """Replay a recorded session turn by turn and print each turn's numbers."""
    import uuid  # noqa: PLC0415

    from flows.bench.client import Client, Scheduled  # noqa: PLC0415
    from flows.bench.session_file import read_session  # noqa: PLC0415
    from flows.bench.session_present import share_line, turn_table  # noqa: PLC0415
    from flows.bench.session_replay import replay, salt_for, turn_numbers  # noqa: PLC0415

    if pace not in ("back_to_back", "recorded"):
        raise SpecError(f"unknown pace {pace!r}", key="--pace", expected="back_to_back or recorded")
    recorded = read_session(session)
    endpoint = _endpoint(url, engine, api_key)
    model = next(iter(endpoint.models()), None)
    client = Client(endpoint.base_url, api_key=api_key)
    try:
        results = replay(
            recorded,
            send=lambda spec: client.run([Scheduled(spec=spec)])[0][0],
            scrape=lambda: endpoint.wait_idle(60.0),
            model=model,
            pace="recorded" if pace == "recorded" else "back_to_back",
            max_gap_s=max_gap_s,
            salt=salt_for(uuid.uuid4().hex),
            turns=turns,
        )
    finally:
        client.close()
    numbers = [turn_numbers(r) for r in results]
    err_console.print(turn_table(numbers, f"{session.name} at {endpoint.base_url}"))
    err_console.print(share_line(numbers), markup=False)
    if as_json:
        out_console.print_json(json.dumps([n.model_dump() for n in numbers]))
    failed = [n.turn for n in numbers if not n.ok]
    if failed:
        raise GateFailedError(f"{len(failed)} turn(s) failed: {failed[:10]}")


def register(app: typer.Typer) -> None:
    """Attach `sparkgate bench` to the root app."""
    app.add_typer(bench_app, name="bench")
