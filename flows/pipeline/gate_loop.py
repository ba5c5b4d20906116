"""The gate loop: every gate in order, each as a cached Prefect task, stopping at the first failure.

A gate that passed is cached by Prefect under a key covering the build digest, the resolved
cluster, its settings and the record (its folder and when it was opened), so a re-run resumes
at the first gate without a result. A failed gate ends its task Failed by returning a state (a
verdict, not a crash); a gate that crashes before it produced a verdict is recorded as failed
with the crash's message. A gate stopped by the machine (disk full, I/O error) is no verdict: the
loop records nothing for it and raises the `MachineError`, so the record stays unpublished and
the same command resumes at that gate. Before each gate the cluster lock is checked
(`ensure_held`): a run whose lock was taken over stops.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from prefect import task
from prefect.client.schemas.objects import State
from prefect.states import Failed

from flows.bench.ledger import Ledger
from flows.cluster.ops.lock import ensure_held
from flows.errors import MachineError, SparkgateError
from flows.gates.base import (
    EarlierTestRun,
    GateContext,
    GateResult,
    Outcome,
    PreviousOutputs,
    RecordedArms,
)
from flows.gates.determinism.kept import record_hashes
from flows.gates.harness import machine_failure, run_gate
from flows.gates.registry import BY_NAME
from flows.gates.release_tests.kept import passed_run
from flows.pipeline.previous import recorded_arms
from flows.pipeline.stages import GATES, digest_of, gate_cache_key
from flows.record import latest_record
from flows.record.aa_ledger import ledger_for
from flows.record.reader import list_records
from flows.record.writer import RecordWriter
from flows.spec.release import BenchmarkGate
from flows.stages import StageObserver


def _gate_key(_context: object, parameters: dict[str, Any]) -> str:
    return str(parameters["key"])


@task(name="gate", cache_key_fn=_gate_key, persist_result=True, cache_expiration=timedelta(days=30))
def gate_task(
    gate: str, key: str, run: Callable[[], GateResult], save: Callable[[GateResult], None]
) -> GateResult | State[GateResult]:
    """Run one gate, write its result into the record at once; a failed gate is not cached.

    A failed gate ends its task Failed by returning the state (a verdict, not a crash: no
    traceback in the log), with the result as the state's data.
    """
    del key  # part of the cache key only
    result = run()
    save(result)
    if result.outcome == Outcome.FAILED:
        return Failed(message=f"{gate}: {result.reason}", data=result)
    return result


def run_gates(
    context: GateContext,
    record: RecordWriter,
    build_digest: str,
    *,
    fresh: bool,
    observer: StageObserver,
) -> dict[str, GateResult]:
    """Run every gate of the release in order; the results so far, up to the first failure."""
    results: dict[str, GateResult] = {}
    for gate in GATES:
        settings = getattr(context.release.gates, gate)
        ensure_held()
        observer.started(gate)
        if not settings.enabled:
            result = _skipped(gate, "disabled in the release file")
            record.save_stage(result)
            results[gate] = result
            observer.finished(gate, "skipped", result.reason)
            continue
        key = gate_cache_key(
            gate, build_digest=build_digest, cluster=context.cluster, settings=settings,
            record=_record_identity(record),
            extra={
                "release": digest_of(context.release.engine),
                "model": digest_of(context.release.model),
                "previous": digest_of(context.previous) if context.previous else None,
                **({"host": _layers_digest(context)} if context.release.host else {}),
            },
        )  # fmt: skip
        run = _gate_runner(gate, context, record, results)
        state = gate_task.with_options(name=gate, refresh_cache=fresh)(
            gate, key, run, record.save_stage, return_state=True
        )
        if state.is_failed():
            stopped = _stopped_on_machine(gate, state)
            if stopped is not None:  # the machine's failure, not the release's: no verdict
                observer.finished(gate, "failed", str(stopped))
                raise stopped
            saved = record.load_stage(gate)
            if saved is None:  # the gate crashed before it produced a verdict
                saved = _skipped(gate, _state_message(state), outcome=Outcome.FAILED)
                record.save_stage(saved)
            results[gate] = saved
            observer.finished(gate, "failed", saved.reason)
            break
        finished = state.result()
        if not isinstance(finished, GateResult):
            raise SparkgateError(f"{gate}: the gate task returned {type(finished).__name__}")
        if record.load_stage(gate) is None:  # cached result from an earlier run of this record
            record.save_stage(finished)
        results[gate] = finished
        cached = state.name == "Cached"
        # passed, skipped or inconclusive (a person decides after the record is published)
        status = "cached" if cached else finished.outcome.value
        observer.finished(gate, status, finished.reason)
    return results


def _layers_digest(context: GateContext) -> str:
    """The release's host layers in a gate's key: a host change is what the gates measure."""
    return digest_of({"host": [layer.model_dump(mode="json") for layer in context.release.host]})


def _record_identity(record: RecordWriter) -> str:
    """The record's folder and when it was opened: a record made again at a removed one's path
    (same day, same release) is another record, so it never takes the old one's cached results,
    whose files are gone with the old folder."""
    return f"{record.path} opened {record.record.created_at.isoformat()}"


def _gate_runner(
    gate: str, context: GateContext, record: RecordWriter, results: dict[str, GateResult]
) -> Callable[[], GateResult]:
    """The call that runs one gate through the harness with what it needs from earlier ones."""
    plugin = BY_NAME[gate]
    out_dir = record.stage_dir(gate)
    settings = getattr(context.release.gates, gate)
    earlier = dict(results)
    return lambda: run_gate(
        plugin, context, settings, plugin.inputs(context, earlier, RecordHistory()), out_dir
    )


class RecordHistory:
    """Earlier records as the gates may read them (the `History` of `flows.gates.base`)."""

    def previous_outputs(self, context: GateContext) -> PreviousOutputs | None:
        """The previous release's determinism hashes, from its newest published record of this
        cluster's shape, and that record's name."""
        if context.previous is None:
            return None
        found = latest_record(
            context.experiments, context.previous.name, shape=context.cluster.shape
        )
        hashes = record_hashes(found) if found is not None else None
        return PreviousOutputs(found.name, hashes) if found is not None and hashes else None

    def ledger(self, context: GateContext, settings: BenchmarkGate) -> Ledger | None:
        """The A/A ledger of the records of this cluster shape and suite."""
        return ledger_for(context, settings)

    def passed_release_tests(self, context: GateContext) -> list[EarlierTestRun]:
        """The passing release-tests runs of published records of this cluster, oldest first
        (an unpublished record may still be resumed and rewritten)."""
        records = sorted(list_records(context.experiments), key=lambda r: (r.created_at, r.name))
        mine = (
            passed_run(record) for record in records
            if record.status == "published" and record.cluster_name == context.cluster.name
        )  # fmt: skip
        return [run for run in mine if run is not None]

    def previous_arms(self, context: GateContext) -> RecordedArms | None:
        """The previous release's own (candidate) arms of its newest published record on this
        shape, each still as saved (`flows.pipeline.previous.recorded_arms`)."""
        if context.previous is None:
            return None
        return recorded_arms(context.experiments, context.previous.name, context.cluster.shape)


def _skipped(gate: str, reason: str, outcome: Outcome = Outcome.SKIPPED) -> GateResult:
    from datetime import UTC, datetime  # noqa: PLC0415

    return GateResult(
        gate=gate, outcome=outcome, reason=reason, started_at=datetime.now(UTC), seconds=0.0
    )


def _stopped_on_machine(gate: str, state: Any) -> MachineError | None:
    """The machine failure a failed gate task ended with (in the gate or saving its result)."""
    try:
        state.result()
    except Exception as error:  # noqa: BLE001 - only the machine's failures are picked out
        return machine_failure(gate, error)
    return None


def _state_message(state: Any) -> str:
    try:
        state.result()
    except SparkgateError as error:
        return str(error)
    except Exception as error:  # noqa: BLE001 - any crash of a gate is reported, not re-raised
        return f"{type(error).__name__}: {error}"
    return str(state.message or "failed")
