"""Run one arm: every workload of a suite against a live endpoint, with sample integrity.

For each point: warm-up samples are discarded, then samples run in seeded shuffled rounds (so
slow drift spreads over all points). Before each sample the engine must be idle; token counters
are read before and after (after waiting for idle again), and a sample whose counters grew by
more than its own requests saw foreign traffic: it is logged and repeated with fresh prompts.
A sample whose client was CPU-bound is repeated with more client processes. A failed request
keeps its receipt; the sample then has no metric values. Nothing is sent before the suite is
checked against the served context length.
"""

from __future__ import annotations

import hashlib
import platform
import socket
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
from pydantic import JsonValue

from flows import __version__
from flows.bench import workloads as wl
from flows.bench.capacity import kv_capacity
from flows.bench.client import Client, RequestSpec, Scheduled
from flows.bench.policy import CLIENT_METRICS, DRAFT_ACCEPTANCE, ENGINE_TPOT
from flows.bench.prompts import PromptFactory
from flows.bench.report import ArmReport, ClientStats, Point, Receipt, Sample
from flows.bench.session_file import Session, read_session
from flows.bench.session_replay import replay, salt_for, session_metrics, turn_numbers
from flows.bench.shards import ShardPool
from flows.engine_api.endpoint import Endpoint
from flows.engine_api.metrics import SUMMARIES, draft_acceptance, engine_step_times
from flows.errors import BenchError
from flows.fileio import sha256_file
from flows.lines import LineSink, silent
from flows.spec.gate_policy import ENGINE_LEVEL
from flows.spec.suite import (
    ClosedLoop,
    Poisson,
    Prefill,
    Prefix,
    SessionReplay,
    SingleStream,
    StepGrid,
    Suite,
    Workload,
)

Measured = tuple[dict[str, float], list[Receipt]]
SampleFn = Callable[[str], Measured]
Planned = list[tuple[str, str, list[tuple[str, SampleFn]]]]
"""(workload kind, workload name, [(point name, sample function)]) in suite order."""
Tick = Callable[[int, int], None]
"""Progress of an arm: samples taken so far (warmups included) and samples planned."""


def _no_tick(_done: int, _total: int) -> None:
    """No one watches the arm's progress."""


@dataclass
class ArmContext:
    """Everything the sample functions share during one arm."""

    endpoint: Endpoint
    suite: Suite
    model: str
    prompts: PromptFactory
    say: LineSink
    http: Client
    shards: ShardPool
    """The arm's client processes, started by the first batch sent over more than one."""
    discarded: list[dict[str, JsonValue]] = field(default_factory=list)
    client: list[ClientStats] = field(default_factory=list)
    saturated: int = 0
    processes: int = 1
    cpu_bound: bool = False
    on_sample: Tick = _no_tick
    samples_done: int = 0
    samples_planned: int = 0
    point_info: dict[str, dict[str, JsonValue]] = field(default_factory=dict)
    """What a point's samples came from beyond the suite (a session file's digest)."""

    def __post_init__(self) -> None:
        self.processes = self.suite.client.processes

    def request(
        self, key: str, tokens: int, max_tokens: int, workload: Workload | None = None
    ) -> RequestSpec:
        """A completion request on a distinct prompt of exactly `tokens` tokens.

        A sampled request (temperature above 0) carries a seed made of the suite's seed and
        the request's key, so every arm sends the very same requests (the recipe seeds each
        of its sampled requests too: `seed=1000 + index` in ds41f:bin/spark suite_sampled).
        """
        suite = self.suite
        temperature = suite.temperature if workload is None else suite.temperature_of(workload)
        body: dict[str, JsonValue] = {
            "model": self.model,
            "prompt": list(self.prompts.ids(key, tokens)),
            "max_tokens": max_tokens,
            "temperature": temperature,
            "ignore_eos": True,
        }
        if temperature > 0:
            body["seed"] = request_seed(self.suite.seed, key)
        if workload is not None and workload.top_p is not None:
            body["top_p"] = workload.top_p
        return RequestSpec(body=body)

    def send(self, items: list[Scheduled]) -> list[Receipt]:
        """Send a batch: on the arm's client, or over client processes for large batches."""
        processes = min(self.processes, len(items))
        if processes > 1:
            receipts, stats = self.shards.run(items, processes)
        else:
            receipts, stats = self.http.run(items)
        self.client.append(stats)
        share = stats.cpu_s / (stats.wall_s * stats.processes) if stats.wall_s else 0.0
        self.cpu_bound |= len(items) > processes and share > self.suite.client.max_cpu_share
        if client_saturated(stats):
            self.saturated += 1
            if self.saturated == 1:
                self.say(f"warning: {saturation_reason(stats)}")
        return receipts


def request_seed(suite_seed: int, key: str) -> int:
    """A sampled request's seed: the same for the same suite seed and request in every arm.

    The key carries the attempt number, never the arm, and the prompt nonce is not part of it.
    """
    return zlib.crc32(f"{suite_seed}:{key}".encode()) & 0x7FFFFFFF


SATURATED_CPU_SHARE = 0.5
SATURATED_LOOP_LAG_MS = 10.0


def client_saturated(stats: ClientStats) -> bool:
    """Whether a batch's client was busy enough to distort timings (CPU share or loop lag)."""
    busy = stats.wall_s > 0 and stats.cpu_s / (stats.wall_s * stats.processes) > SATURATED_CPU_SHARE
    return busy or (stats.loop_lag_p99_ms or 0.0) > SATURATED_LOOP_LAG_MS


def saturation_reason(stats: ClientStats) -> str:
    """Why a batch's timings are suspect: a busy client, or a busy machine."""
    share = stats.cpu_s / (stats.wall_s * stats.processes) if stats.wall_s else 0.0
    lag = stats.loop_lag_p99_ms or 0.0
    if share > SATURATED_CPU_SHARE:
        return f"the client used {share:.0%} of a CPU per process; raise client.processes"
    return (
        f"event-loop lag p99 {lag:.1f} ms while the client used {share:.0%} of a CPU: "
        "the machine is busy and timings include scheduling delays"
    )


def _foreign(
    before: dict[str, float], after: dict[str, float], receipts: list[Receipt]
) -> dict[str, JsonValue]:
    """Counter growth beyond what this sample's own requests account for."""
    ours = {
        "prompt_tokens": sum(r.prompt_tokens or 0 for r in receipts),
        "generation_tokens": sum(r.completion_tokens or 0 for r in receipts),
    }
    extra: dict[str, JsonValue] = {}
    for name, own in ours.items():
        if name in before and name in after and after[name] - before[name] > own:
            extra[name] = after[name] - before[name] - own
    return extra


def measure(ctx: ArmContext, point: str, key: str, fn: SampleFn) -> Sample:
    """One sample of a point on an idle engine, repeated while foreign traffic shows.

    A sample whose client was CPU-bound is repeated with twice the client processes (up to
    `client.max_processes`), so the client's own limits do not end up in the numbers.

    Raises:
        BenchError: when every attempt saw foreign traffic, or the engine never got idle.
    """
    attempt = foreign_attempts = 0
    while foreign_attempts <= ctx.suite.idle.retries:
        attempt += 1
        ctx.cpu_bound = False
        before = ctx.endpoint.wait_idle(ctx.suite.idle.timeout_s)
        metrics, receipts = fn(f"{key}/a{attempt}")
        after = ctx.endpoint.wait_idle(ctx.suite.idle.timeout_s)
        foreign = _foreign(before, after, receipts)
        if foreign:
            foreign_attempts += 1
            ctx.discarded.append({"point": point, "sample": key, "attempt": attempt, **foreign})
            ctx.say(f"{point} {key}: foreign traffic {foreign}; repeating the sample")
            continue
        if ctx.cpu_bound and ctx.processes < ctx.suite.client.max_processes:
            ctx.processes = min(2 * ctx.processes, ctx.suite.client.max_processes)
            ctx.discarded.append(
                {"point": point, "sample": key, "attempt": attempt, "client_saturated": True}
            )
            ctx.say(f"{point} {key}: client CPU-bound; repeating with {ctx.processes} processes")
            continue
        failed = [r.error for r in receipts if not r.ok]
        if failed:
            ctx.say(f"{point} {key}: {len(failed)} failed request(s): {failed[0]}")
        ok = wl.all_ok(receipts)
        return Sample(
            metrics=(
                {**metrics, **engine_step_times(before, after), **draft_acceptance(before, after)}
                if ok
                else {}
            ),
            receipts=receipts,
            attempts=attempt,
            engine=_step_counters(before, after),
        )
    raise BenchError(f"{point}: foreign traffic in all {ctx.suite.idle.retries + 1} attempts")


def _step_counters(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The raw growth of the engine's step summaries over a sample, kept with the sample."""
    keys = [f"{name}_{part}" for name in SUMMARIES for part in ("sum", "count")]
    return {key: after[key] - before[key] for key in keys if key in before and key in after}


def _single(ctx: ArmContext, w: SingleStream) -> SampleFn:
    def run(key: str) -> Measured:
        receipts = []
        for i in range(w.requests):
            spec = ctx.request(f"{key}/{i}", w.prompt_tokens, w.max_tokens, w)
            receipts += ctx.send([Scheduled(spec=spec)])
        return wl.single_stream(receipts), receipts

    return run


def _closed(ctx: ArmContext, w: ClosedLoop, streams: int) -> SampleFn:
    def run(key: str) -> Measured:
        items = [
            Scheduled(spec=ctx.request(f"{key}/{i}", w.prompt_tokens, w.max_tokens, w))
            for i in range(streams)
        ]
        receipts = ctx.send(items)
        return wl.closed_loop(receipts), receipts

    return run


def _poisson(ctx: ArmContext, w: Poisson, counter: list[int]) -> SampleFn:
    def run(key: str) -> Measured:
        counter[0] += 1  # a new seeded schedule per sample, the same sequence in every arm
        due = wl.poisson_schedule(w.rate, w.requests, ctx.suite.seed * 1000 + counter[0])
        items = [
            Scheduled(due_s=t, spec=ctx.request(f"{key}/{i}", w.prompt_tokens, w.max_tokens, w))
            for i, t in enumerate(due)
        ]
        receipts = ctx.send(items)
        return wl.poisson(receipts), receipts

    return run


def _prefill(ctx: ArmContext, w: Prefill, depth: int) -> SampleFn:
    def run(key: str) -> Measured:
        receipts = ctx.send([Scheduled(spec=ctx.request(key, depth, w.max_tokens, w))])
        return wl.prefill(receipts[0]), receipts

    return run


def _step(ctx: ArmContext, w: StepGrid) -> SampleFn:
    def run(key: str) -> Measured:
        shapes: dict[str, list[Receipt]] = {}
        for streams in w.concurrency:
            for context in w.context:
                shape = wl.shape_key(streams, context)
                shapes[shape] = ctx.send(
                    [
                        Scheduled(spec=ctx.request(f"{key}/{shape}/{i}", context, w.max_tokens, w))
                        for i in range(streams)
                    ]
                )
        receipts = [r for batch in shapes.values() for r in batch]
        return wl.step_grid(shapes), receipts

    return run


def _prefix(ctx: ArmContext, w: Prefix) -> SampleFn:
    def run(key: str) -> Measured:
        item = Scheduled(spec=ctx.request(key, w.prompt_tokens, w.max_tokens, w))
        cold = ctx.send([item])
        warm = [r for _ in range(w.warm_replays) for r in ctx.send([item])]
        return wl.prefix(cold[0], warm), cold + warm

    return run


def _session(ctx: ArmContext, w: SessionReplay, session: Session) -> SampleFn:
    def run(key: str) -> Measured:
        results = replay(
            session,
            send=lambda spec: ctx.send([Scheduled(spec=spec)])[0],
            scrape=lambda: ctx.endpoint.wait_idle(ctx.suite.idle.timeout_s),
            model=ctx.model,
            pace=w.pace,
            max_gap_s=w.max_gap_s,
            salt=salt_for(ctx.prompts.nonce, key),  # a cold start, same length in every arm
            turns=w.turns,
            default_tokens=w.max_tokens,
        )
        return session_metrics([turn_numbers(r) for r in results]), [r.receipt for r in results]

    return run


def plan(ctx: ArmContext) -> Planned:
    """(workload kind, workload name, [(point name, sample function)]) in suite order."""
    out: Planned = []
    for w in ctx.suite.workloads:
        points: list[tuple[str, SampleFn]]
        match w:
            case SingleStream():
                points = [(f"{w.name}/c1", _single(ctx, w))]
            case ClosedLoop():
                points = [(f"{w.name}/c{c}", _closed(ctx, w, c)) for c in w.concurrency]
            case Poisson():
                points = [(f"{w.name}/r{w.rate:g}", _poisson(ctx, w, [0]))]
            case Prefill():
                points = [(f"{w.name}/{d}", _prefill(ctx, w, d)) for d in w.depths]
            case StepGrid():
                points = [(f"{w.name}/grid", _step(ctx, w))]
            case Prefix():
                points = [(f"{w.name}/{w.prompt_tokens}", _prefix(ctx, w))]
            case SessionReplay():
                point, session = f"{w.name}/{w.file.stem}", read_session(w.file)
                ctx.point_info[point] = {"session_sha256": sha256_file(w.file),
                                         "session_turns": len(session.turns)}  # fmt: skip
                points = [(point, _session(ctx, w, session))]
        out.append((w.kind, w.name, points))
    return out


def _run_workload(
    ctx: ArmContext, kind: str, points: list[tuple[str, SampleFn]], samples: int, warmup: int
) -> dict[str, Point]:
    collected: dict[str, list[Sample]] = {name: [] for name, _ in points}
    warmups: dict[str, list[Sample]] = {name: [] for name, _ in points}
    for name, fn in points:
        for i in range(warmup):
            warmups[name].append(measure(ctx, name, f"{name}/warmup{i}", fn))
            _tick(ctx)
    for round_index in range(samples):
        rng = np.random.default_rng(ctx.suite.seed * 7919 + round_index)
        order = [points[i] for i in rng.permutation(len(points))]
        for name, fn in order:
            collected[name].append(measure(ctx, name, f"{name}/s{round_index}", fn))
            _tick(ctx)
            ctx.say(f"{name} sample {round_index + 1}/{samples}: {_brief(collected[name][-1])}")
    return {
        name: Point(
            workload=kind,
            gate=compared_metrics(kind, samples_),
            samples=samples_,
            warmup=warmups[name],
            info={
                "failed_requests": sum(not r.ok for s in samples_ for r in s.receipts),
                **ctx.point_info.get(name, {}),
            },
        )
        for name, samples_ in collected.items()
    }


def compared_metrics(kind: str, samples: list[Sample]) -> list[str]:
    """The client metrics of the kind, then the engine's step and token times and draft
    acceptance where it reported them."""
    engine = (*ENGINE_LEVEL, ENGINE_TPOT, DRAFT_ACCEPTANCE)
    reported = [m for m in engine if any(m in sample.metrics for sample in samples)]
    return [*CLIENT_METRICS[kind], *reported]


def _tick(ctx: ArmContext) -> None:
    ctx.samples_done += 1
    ctx.on_sample(ctx.samples_done, ctx.samples_planned)


def planned_samples(suite: Suite, planned: Planned) -> int:
    """Samples an arm takes, warmups included: the total its progress counts to."""
    by_name = {w.name: w for w in suite.workloads}
    return sum(
        len(points) * (suite.warmup_of(by_name[name]) + suite.samples_of(by_name[name]))
        for _kind, name, points in planned
    )


def _brief(sample: Sample) -> str:
    shown = [f"{k}={v:.4g}" for k, v in sample.metrics.items() if "@" not in k]
    return " ".join(shown) or "no values (failed requests)"


def merge_client(stats: list[ClientStats]) -> ClientStats | None:
    """One summary of the client's cost over all batches of an arm (lags: worst batch)."""
    if not stats:
        return None
    chunks = sum(s.chunks for s in stats)
    cpu = sum(s.cpu_s for s in stats)

    def worst(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return max(present) if present else None

    return ClientStats(
        processes=max(s.processes for s in stats),
        wall_s=sum(s.wall_s for s in stats),
        cpu_s=cpu,
        chunks=chunks,
        cpu_us_per_chunk=1e6 * cpu / chunks if chunks else None,
        parse_lag_p50_ms=worst([s.parse_lag_p50_ms for s in stats]),
        parse_lag_p99_ms=worst([s.parse_lag_p99_ms for s in stats]),
        loop_lag_p99_ms=worst([s.loop_lag_p99_ms for s in stats]),
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _longest(workload: object) -> int:
    """The most tokens one request of a workload needs (prompt + output)."""
    prompts = [getattr(workload, "prompt_tokens", 0)]
    prompts += list(getattr(workload, "depths", [])) + list(getattr(workload, "context", []))
    return max(prompts) + int(getattr(workload, "max_tokens", 0))


def check_context(suite: Suite, max_model_len: int | None) -> None:
    """Refuse a suite whose requests cannot fit the served context, before measuring anything.

    Raises:
        BenchError: naming the first workload that does not fit.
    """
    if max_model_len is None:
        return
    for workload in suite.workloads:
        need = _longest(workload)
        if need > max_model_len:
            raise BenchError(
                f"suite {suite.name}: workload {workload.name} needs {need} tokens per request; "
                f"the served context is {max_model_len}"
            )


def suite_digest(suite: Suite) -> str:
    """The suite as run, as a digest: arms compare only when they ran the same suite."""
    return hashlib.sha256(suite.model_dump_json().encode()).hexdigest()


def _report(
    ctx: ArmContext,
    *,
    label: str,
    started: str,
    points: dict[str, Point],
    missing: list[str],
    capacity: dict[str, float] | None = None,
) -> ArmReport:
    """The arm report as it stands (finished_utc stays None until the caller finishes it)."""
    suite = ctx.suite
    return ArmReport(
        label=label,
        source="sparkgate",
        url=ctx.endpoint.base_url,
        suite=suite.name,
        started_utc=started,
        identity={
            "model": ctx.model,
            "client_host": socket.gethostname(),
            "python": platform.python_version(),
            "sparkgate": __version__,
            "suite_sha256": suite_digest(suite),
            "prompt_nonce": ctx.prompts.nonce,
            "client_saturated_batches": ctx.saturated,
            "metrics_missing": list(missing),
            # KV cache capacity when the engine exports it (flows.bench.capacity): reported
            **(capacity or {}),
        },
        workload=suite.model_dump(mode="json"),
        points=dict(points),
        client=merge_client(ctx.client),
        discarded=list(ctx.discarded),
    )


def run_arm(
    endpoint: Endpoint,
    suite: Suite,
    *,
    label: str,
    say: LineSink = silent,
    checkpoint: Callable[[ArmReport], object] | None = None,
    on_sample: Tick | None = None,
) -> ArmReport:
    """Measure every workload of `suite` once against `endpoint` (one arm) and report it.

    `checkpoint` receives the report after every workload (unfinished), and once more with
    `aborted` set if the arm stops on an error, so finished workloads are never lost.

    Raises:
        BenchError: if the endpoint serves no model or a sample cannot be taken cleanly.
    """
    started = _now()
    served = endpoint.models()
    model = suite.model or next(iter(served), None)
    if model is None:
        raise BenchError(f"{endpoint.base_url}: serves no model")
    check_context(suite, served.get(model))
    missing = endpoint.missing_metrics()
    capacity = kv_capacity(endpoint.metrics_text())
    if capacity:
        say(f"KV cache: {capacity.get('kv_capacity_tokens', 0):.0f} tokens (reported)")
    if missing:
        say(f"warning: {endpoint.base_url} does not export {', '.join(missing)}: "
            "the idle and foreign-traffic checks that need them are off")  # fmt: skip
    prompts = PromptFactory(
        tokenize=lambda text: endpoint.tokenize(text, model),
        seed=suite.seed,
        nonce=uuid.uuid4().hex[:12],
    )
    timeout_s, api_key = suite.client.timeout_s, endpoint.api_key
    http = Client(endpoint.base_url, timeout_s=timeout_s, api_key=api_key)
    shards = ShardPool(endpoint.base_url, timeout_s=timeout_s, api_key=api_key)
    ctx = ArmContext(
        endpoint=endpoint, suite=suite, model=model, prompts=prompts, say=say, http=http,
        shards=shards, on_sample=on_sample or _no_tick,
    )  # fmt: skip
    planned_points = plan(ctx)
    ctx.samples_planned = planned_samples(suite, planned_points)
    points: dict[str, Point] = {}

    def report() -> ArmReport:
        return _report(
            ctx, label=label, started=started, points=points, missing=missing, capacity=capacity
        )

    try:
        for kind, name, planned in planned_points:
            workload = next(w for w in suite.workloads if w.name == name)
            say(f"workload {name} ({kind}): {', '.join(p for p, _ in planned)}")
            points |= _run_workload(
                ctx, kind, planned, suite.samples_of(workload), suite.warmup_of(workload)
            )
            if checkpoint is not None:
                checkpoint(report())
    except BenchError as error:
        if checkpoint is not None:
            checkpoint(report().model_copy(update={"aborted": str(error)}))
        raise
    finally:
        with shards:  # closed even when closing the HTTP client fails
            http.close()
    return report().model_copy(update={"finished_utc": _now()})
