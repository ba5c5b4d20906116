"""`sparkgate calibrate RELEASE [--arms 3]`: grow the A/A ledger with one release in every arm.

The benchmark gate can only bound boot-to-boot noise with past A/A gaps; a calibration measures
them on purpose (the same release booted fresh in each arm) and publishes them as a calibration
record, which every later qualification of the same cluster shape and suite then pools. It runs
under the same live board as `sparkgate qualify` (Prefect's own lines only with -v).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from flows.commands.cluster import ClusterOption, JsonOption, cluster_path, load_cluster
from flows.commands.qualify import VerboseOption, watched_run
from flows.errors import BenchError, SpecError
from flows.names import release_path
from flows.stages import CALIBRATION_STAGES
from flows.ui.console import err_console, out_console

if TYPE_CHECKING:
    from flows.spec.release import BenchmarkGate


def calibrate(  # noqa: PLR0917 - typer maps parameters to options
    release: Annotated[
        str, typer.Argument(help="Release name or file, e.g. r1 or releases/r1.yaml.")
    ],
    arms: Annotated[
        int, typer.Option("--arms", help="Fresh boots of the release (n arms give n-1 gaps).")
    ] = 3,
    gated_only: Annotated[
        bool,
        typer.Option(
            "--gated-only",
            help="Measure only the suite's gating workloads (shorter arms; reported points get "
            "no gaps from this calibration).",
        ),
    ] = False,
    cluster: ClusterOption = "local",
    as_json: JsonOption = False,
    verbose: VerboseOption = False,
) -> None:
    """Run RELEASE in every arm and add its A/A gaps to the ledger (a calibration record)."""
    from flows.cluster.runtime.factory import check_fits  # noqa: PLC0415
    from flows.pipeline.embedded import launched_backend  # noqa: PLC0415
    from flows.settings import prefect_environment, state_dir  # noqa: PLC0415
    from flows.spec.release import load_release  # noqa: PLC0415

    if arms < 2:
        raise SpecError(f"{arms} arms give no A/A gap", key="--arms", expected="2 or more")
    spec = load_cluster(cluster)
    release_file = release_path(release)
    chosen = load_release(release_file)
    check_fits(spec, chosen, release_file, cluster_path(cluster))  # before Prefect starts
    settings = chosen.gates.benchmark
    prefect_environment()
    # The server boots while the flow and Prefect are imported; watched_run waits for it.
    with launched_backend(state_dir() / "prefect") as backend:
        from flows.pipeline.calibrate import calibrate_flow  # noqa: PLC0415 - imports prefect
        from flows.pipeline.events import current_observer  # noqa: PLC0415

        measured = ", gated workloads only" if gated_only else ""
        title = f"calibrate {Path(release_file).stem} on {spec.name}, {arms} arms{measured}"
        with watched_run(title, backend, verbose=verbose, stages=CALIBRATION_STAGES) as board:
            token = current_observer.set(board)
            try:
                state = calibrate_flow(
                    str(release_file.resolve()), str(cluster_path(cluster).resolve()), arms,
                    gated_only, return_state=True,
                )  # fmt: skip
            finally:
                current_observer.reset(token)
    if state.is_failed():
        try:
            state.result()
        except BenchError:
            raise
        except Exception as error:
            raise BenchError(f"{release}: calibration failed: {error}") from error
    outcome = state.result()
    if as_json:
        out_console.print_json(json.dumps(outcome.model_dump(mode="json")))
    err_console.print(f"{escape(outcome.release)}: {escape(outcome.reason)}")
    err_console.print(
        f"record: {escape(outcome.record)}; the ledger for this shape and suite now holds "
        f"{outcome.ledger_sessions} A/A gaps"
    )
    for line in _resolution(release_file, settings, spec.shape):
        err_console.print(line, markup=False, highlight=False)


def _resolution(release_file: Path, settings: BenchmarkGate, shape: str) -> list[str]:
    """What the grown ledger now lets the release's benchmark resolve, and whether `qualify`
    would refuse its tolerance (said here, so the operator knows before qualifying)."""
    from flows.gates.benchmark.resolution import (  # noqa: PLC0415
        cluster_resolution,
        refusal,
        resolution_lines,
    )
    from flows.pipeline.inputs import arm_seconds  # noqa: PLC0415
    from flows.record.aa_ledger import ledger_from_records  # noqa: PLC0415
    from flows.settings import project_root  # noqa: PLC0415
    from flows.spec.suites import load_suites  # noqa: PLC0415

    experiments = project_root() / "experiments"
    suite = load_suites(settings.suites())
    resolution = cluster_resolution(
        settings, suite, ledger_from_records(experiments, shape, suite.name)
    )
    lines = resolution_lines(resolution, shape, suite.name)
    problem = refusal(resolution, release_file, settings, arm_seconds(experiments, shape))
    if problem is not None:
        lines.append(f"qualify would refuse this release: {problem}")
    return lines


def register(app: typer.Typer) -> None:
    """Attach `sparkgate calibrate`."""
    app.command("calibrate")(calibrate)
