"""N benchmark sessions of one candidate against its previous release, on a real cluster.

The targets of the benchmark gate are distributions, not single runs: how often r2 is decided
within five arms, how often a 5 % slower engine is called slower, how often r1 is called slower
than itself. This runs the gate's own session (`run_benchmark`: fresh boot per arm, the release's
suite, arms added while a gated point is undecided) `--sessions` times after one build and
install, with the A/A ledger a qualification would get, and prints the decisions, the arms each
took, their wall times and every gated point's verdict; `sessions.json` keeps them.

    python -m flows.research.sessions releases/r2.yaml --sessions 10
    python -m flows.research.sessions releases/r1.yaml --previous releases/r1.yaml
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from flows.ui.console import out_console


def say(line: str) -> None:
    """One plain line on stdout (no markup: reasons hold brackets)."""
    out_console.print(line, markup=False, highlight=False, soft_wrap=True)


class SessionRow(BaseModel):
    """One session: its decision, how many arms it took, how long, and the gated verdicts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session: int = Field(description="index from 1")
    decision: str = Field(description="the gate's decision (pass, fail-slower, ...)")
    arms: int = Field(description="arms run")
    seconds: float = Field(description="wall time of the session")
    verdicts: dict[str, str] = Field(description="'point metric' -> verdict of each gated row")
    reason: str = Field(description="the gate's one-line reason")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m flows.research.sessions")
    parser.add_argument("release", type=Path, help="candidate release file")
    parser.add_argument("--previous", type=Path, help="previous release file (default: its own)")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--cluster", default="config/local.yaml")
    parser.add_argument("--max-arms", type=int, help="override the release's max_arms")
    parser.add_argument("--no-ledger", action="store_true", help="ignore the A/A ledger")
    parser.add_argument("--out", type=Path, default=Path(".sparkgate/sessions"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the sessions and print their verdict distribution."""
    args = _arguments(argv)
    from flows.settings import prefect_environment  # noqa: PLC0415

    prefect_environment()
    from flows.pipeline.embedded import launched_backend  # noqa: PLC0415
    from flows.settings import state_dir  # noqa: PLC0415

    # The server boots while Prefect is imported.
    with launched_backend(state_dir() / "prefect") as backend:
        from prefect import flow  # noqa: PLC0415

        run_sessions = flow(name="benchmark-sessions", validate_parameters=False)(
            benchmark_sessions
        )
        with backend.ready():
            rows = run_sessions(
                str(args.release.resolve()),
                str(args.previous.resolve()) if args.previous else None,
                str(Path(args.cluster).resolve()),
                args.sessions,
                args.max_arms,
                not args.no_ledger,
                str(args.out.resolve()),
            )
    _print(rows)
    return 0


def benchmark_sessions(  # noqa: PLR0917 - a flow's parameters are its command line
    release_file: str,
    previous_file: str | None,
    cluster_file: str,
    sessions: int,
    max_arms: int | None,
    use_ledger: bool,
    out: str,
) -> list[SessionRow]:
    """Build and install once, then run the benchmark gate's session `sessions` times."""
    from flows.cluster.runtime.factory import check_fits  # noqa: PLC0415
    from flows.gates.benchmark.runner import run_benchmark  # noqa: PLC0415
    from flows.gates.benchmark.summary import BenchmarkSummary  # noqa: PLC0415
    from flows.pipeline.events import observer_of_run  # noqa: PLC0415
    from flows.pipeline.prelude import prepared_cluster  # noqa: PLC0415
    from flows.record.aa_ledger import ledger_for  # noqa: PLC0415
    from flows.spec.cluster import Cluster  # noqa: PLC0415
    from flows.spec.load import load_model  # noqa: PLC0415
    from flows.spec.release import load_previous, load_release  # noqa: PLC0415

    release = load_release(release_file)
    previous = (
        load_release(previous_file) if previous_file else load_previous(release_file, release)
    )
    if previous is None:
        raise SystemExit(f"{release_file}: names no previous release; pass --previous")
    cluster = load_model(cluster_file, Cluster)
    check_fits(cluster, release, release_file, cluster_file)
    settings = release.gates.benchmark
    if max_arms is not None:
        settings = settings.model_copy(update={"max_arms": max_arms})
    root = Path(out) / f"{release.name}-vs-{previous.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    rows: list[SessionRow] = []
    with prepared_cluster(
        release, cluster, previous=previous, command=f"sessions {release_file}",
        observer=observer_of_run(), records=root / "records", resume=False,
    ) as prepared:  # fmt: skip
        ledger = ledger_for(prepared.context, settings) if use_ledger else None
        for index in range(1, sessions + 1):
            began = time.monotonic()
            result = run_benchmark(
                prepared.context, settings, root / f"session-{index}", ledger=ledger
            )
            summary = result.summary_as(BenchmarkSummary)
            rows.append(
                SessionRow(
                    session=index,
                    decision=summary.decision or result.outcome.value if summary else "error",
                    arms=len(summary.arms) if summary else 0,
                    seconds=round(time.monotonic() - began, 1),
                    verdicts={
                        f"{p.point} {p.unit}": p.verdict
                        for p in (summary.points if summary else [])
                        if p.gated
                    },
                    reason=result.reason,
                )
            )
            say(f"session {index}/{sessions}: {rows[-1].decision} after {rows[-1].arms} arms "
                f"in {rows[-1].seconds:.0f}s: {result.reason}")  # fmt: skip
            (root / "sessions.json").write_text(
                json.dumps([row.model_dump() for row in rows], indent=1) + "\n"
            )
    return rows


def _print(rows: list[SessionRow]) -> None:
    decisions = collections.Counter(row.decision for row in rows)
    arms = collections.Counter(row.arms for row in rows)
    seconds = sorted(row.seconds for row in rows)
    say(f"{len(rows)} sessions: " + ", ".join(f"{k} {v}" for k, v in decisions.most_common()))
    say("arms: " + ", ".join(f"{k} arms x{v}" for k, v in sorted(arms.items())))
    if seconds:
        say(f"wall: median {seconds[len(seconds) // 2]:.0f}s, max {seconds[-1]:.0f}s")
    verdicts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for row in rows:
        for key, verdict in row.verdicts.items():
            verdicts[key][verdict] += 1
    for key, counts in verdicts.items():
        say(f"  {key}: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))


if __name__ == "__main__":
    raise SystemExit(main())
