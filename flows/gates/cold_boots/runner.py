"""The cold-boots gate: boots with emptied caches must prepare, meet and serve without compiling.

For each mode (warm; one rank's kernel cache empty; every rank's; every cache kind on every
node) the caches are emptied through the pipeline, the candidate is booted and its timeline
kept: time to ready, per-rank preparation seconds and kernels, the liveness wait. Then a spot
check (a few greedy prompts), a burst of concurrent streams with logprobs, and the spot check
again; the rank logs are read once more from the start and the compile counter scraped, and
both must show zero compiles after preparation. The spot check sends the first determinism
prompts (ids p0, p1, ..., the determinism max_tokens), so it must equal the determinism gate's
hashes when the flow passes them in as `reference`, else the first boot's own. A failed boot is
a failed row naming its cause, with its evidence folder; the other modes still run, so the
table shows everything at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from flows.cluster.boot.caches import CacheTarget, cache_targets
from flows.cluster.boot.session import Started
from flows.cluster.boot.timeline import COMPILE, LogEvent, LogReader
from flows.cluster.runtime.factory import runtime_for
from flows.engine_api.endpoint import Endpoint
from flows.errors import BenchError, BootError, SparkgateError
from flows.gates.base import (
    GateContext,
    GateResult,
    GateVerdict,
    History,
    Outcome,
    api_base_url,
)
from flows.gates.cold_boots.plan import plan_steps
from flows.gates.cold_boots.rules import (
    NAME,
    BootObservation,
    boot_row,
    cold_boots_verdict,
    rank_figures,
)
from flows.gates.cold_boots.story import COLD_BOOTS_STORY, ColdBootsStory
from flows.gates.cold_boots.summary import ColdBootsSummary
from flows.gates.determinism.summary import DeterminismSummary, PromptHashes
from flows.gates.files import GateFiles
from flows.gates.harness import run_gate
from flows.gates.outputs import Output, hashes, matches_reference, output_from_completion
from flows.gates.plan import PlanContext, PlanStep
from flows.gates.prompts import Prompt, named_prompts
from flows.gates.running import running_release
from flows.gates.traffic import complete, open_client, stream
from flows.spec.launch import render_all
from flows.spec.release import ColdBootsGate

TOP_LOGPROBS = 5
Hashes = Mapping[str, Mapping[str, str]]


@dataclass(frozen=True)
class ColdBootsRunner:
    """The cold-boots gate as the registry lists it."""

    name: str = NAME
    title: str = "cold boots"
    settings_model: type[ColdBootsGate] = ColdBootsGate
    summary_model: type[ColdBootsSummary] = ColdBootsSummary
    boot_failure: str = "boot failed"
    story: ColdBootsStory = COLD_BOOTS_STORY

    def inputs(
        self, context: GateContext, earlier: Mapping[str, GateResult], history: History
    ) -> Hashes | None:
        """The determinism gate's hashes of this run, when it ran (else the first boot's own)."""
        del context, history
        determinism = earlier.get("determinism")
        summary = determinism.summary_as(DeterminismSummary) if determinism else None
        return summary.hash_table() if summary is not None else None

    def plan(self, given: PlanContext) -> list[PlanStep]:
        """What the gate would do on which node (`sparkgate qualify --plan`)."""
        return plan_steps(given)

    def run(
        self, context: GateContext, settings: ColdBootsGate, inputs: Hashes | None, files: GateFiles
    ) -> GateVerdict:
        """Boot once per mode; each must be ready, compile nothing after preparation, match.

        `inputs`: per prompt id {"tokens", "logprobs"} hashes (the determinism summary's
        `hashes` or its hashes.json); extra keys are ignored.
        """
        clock = time.monotonic()
        reference = inputs
        greedy = context.release.gates.determinism
        spot = named_prompts(greedy.prompts[: settings.spot_check], greedy.max_tokens)
        plans = render_all(context.cluster, context.release, {"python": "python"})
        evidence: list[str] = []
        seen: list[BootObservation] = []
        for mode in settings.modes:
            if time.monotonic() - clock > settings.timeout_s:
                seen.append(
                    BootObservation(mode=mode, error=f"not run: timeout_s {settings.timeout_s:g}")
                )
                continue
            targets = cache_targets(plans, mode, rank=settings.rank)
            context.say(f"cold boots: {mode} ({len(targets)} cache folders emptied)")
            observed, raw, folder = _one_boot(
                context, settings, mode, targets, spot=spot, reference=reference
            )
            if reference is None and observed.error is None and raw.get("spot"):
                reference = hashes(Output.model_validate(o) for o in raw["spot"][: len(spot)])
                observed = _judge_spot(observed, raw, reference)
            seen.append(observed)
            context.advance("boots", len(seen), len(settings.modes))
            for name, text in raw.pop("logs", {}).items():
                files.write_text(f"boots/{mode}/{name}.log", text)
            files.write_json(f"boots/{mode}.json", raw)
            if folder is not None:
                evidence.append(str(folder))
            context.say(f"cold boots: {mode}: {boot_row(observed).what_happened}")
        passed, reason = cold_boots_verdict(seen)
        summary = ColdBootsSummary(
            boots=[boot_row(observation) for observation in seen],
            reference={
                p.id: PromptHashes.model_validate(
                    {k: reference[p.id][k] for k in ("tokens", "logprobs")}
                )
                for p in spot
                if reference is not None and p.id in reference
            },
        )
        files.write_json("summary.json", summary.model_dump(mode="json"))
        return GateVerdict(
            outcome=Outcome.PASSED if passed else Outcome.FAILED,
            reason=reason,
            summary=summary,
            evidence=evidence,
        )


COLD_BOOTS = ColdBootsRunner()


def run_cold_boots(
    context: GateContext,
    settings: ColdBootsGate,
    out_dir: Path,
    *,
    reference: Hashes | None = None,
) -> GateResult:
    """The gate through the harness, on its own (tests and scripts)."""
    return run_gate(COLD_BOOTS, context, settings, reference, out_dir)


def _one_boot(
    context: GateContext,
    settings: ColdBootsGate,
    mode: str,
    targets: Sequence[CacheTarget],
    *,
    spot: Sequence[Prompt],
    reference: Hashes | None,
) -> tuple[BootObservation, dict[str, Any], Path | None]:
    """Empty, boot, traffic, read back; the observation, raw data and any evidence folder."""
    emptied = sorted({t.rank for t in targets if t.kind == context.cluster.engine.kernel_cache})
    raw: dict[str, Any] = {"mode": mode, "emptied": [t.model_dump() for t in targets]}
    try:
        with running_release(context, empty=targets) as started:
            raw["timeline"] = started.session.timeline.model_dump(mode="json")
            outputs = asyncio.run(
                asyncio.wait_for(_traffic(context, settings, spot), timeout=settings.timeout_s)
            )
            raw["spot"] = [o.model_dump() for o in outputs]
            raw["logs"] = _logs(context, started)
            events = _compile_events(context, started, raw["logs"])
            metric = _compiles_metric(context)
    except BootError as error:
        observed = BootObservation(mode=mode, emptied_ranks=emptied, error=str(error))
        raw["error"] = str(error)
        return observed, raw, error.evidence
    except (SparkgateError, aiohttp.ClientError, TimeoutError, ValueError) as error:
        observed = BootObservation(mode=mode, emptied_ranks=emptied, error=f"traffic: {error}")
        raw["error"] = str(error)
        return observed, raw, None
    raw["compile_events"] = [e.model_dump(mode="json") for e in events]
    raw["compiles_metric"] = metric
    timeline = started.session.timeline
    observed = BootObservation(
        mode=mode,
        emptied_ranks=emptied,
        ready_s=timeline.ready_s,
        ranks=rank_figures(timeline),
        compiles_logged=len(events),
        compile_lines=[_compile_name(e) for e in events],
        compiles_metric=metric,
    )
    return _judge_spot(observed, raw, reference), raw, None


def _judge_spot(
    observed: BootObservation, raw: Mapping[str, Any], reference: Hashes | None
) -> BootObservation:
    """Every spot-check response (before and after the burst) against the reference hashes."""
    if reference is None or not raw.get("spot"):
        return observed
    outputs = [Output.model_validate(o) for o in raw["spot"]]
    differing = sorted({o.prompt for o in outputs if not matches_reference(reference, o)})
    return observed.model_copy(
        update={
            "spot_check": "differs" if differing else "identical",
            "spot_differing": differing,
        }
    )


async def _traffic(
    context: GateContext, settings: ColdBootsGate, spot: Sequence[Prompt]
) -> list[Output]:
    """Spot check, a burst of concurrent streams (greedy and sampled), spot check again."""
    async with open_client(api_base_url(context.cluster), TOP_LOGPROBS) as client:
        before = [await complete(client, prompt) for prompt in spot]
        texts = [p.text for p in spot] or ["Hello"]
        burst = [
            Prompt(id=f"burst{i}", text=texts[i % len(texts)], max_tokens=settings.max_tokens)
            for i in range(settings.requests_after_ready)
        ]
        await asyncio.gather(
            *(stream(client, p, temperature=float(i % 2)) for i, p in enumerate(burst))
        )
        after = [await complete(client, prompt) for prompt in spot]
    return [output_from_completion(a.prompt, a.response) for a in [*before, *after]]


def _logs(context: GateContext, started: Started) -> dict[str, str]:
    """Every rank's whole log so far, read back through the runtime."""
    runtime = runtime_for(context.cluster, context.transports)
    return {
        f"{handle.node}-rank{handle.rank}": runtime.read_log(handle, 0)
        for handle in started.session.handles
    }


def _compile_events(
    context: GateContext, started: Started, logs: Mapping[str, str]
) -> list[LogEvent]:
    """Compile-after-preparation events in the rank logs (boot and traffic alike)."""
    found: list[LogEvent] = []
    for handle in started.session.handles:
        reader = LogReader(context.cluster.engine.logs, node=handle.node, rank=handle.rank)
        text = logs.get(f"{handle.node}-rank{handle.rank}", "")
        found.extend(e for e in reader.read(text.splitlines()) if e.name == COMPILE)
    return found


def _compiles_metric(context: GateContext) -> float | None:
    """The profile's compile counter on the head, or None when the engine exports none."""
    metrics = context.cluster.engine.metrics
    if metrics.compiles is None:
        return None
    endpoint = Endpoint(
        api_base_url(context.cluster),
        metric_names={"compiles": metrics.compiles},
        metrics_path=metrics.path,
    )
    try:
        return endpoint.metrics().get("compiles")
    except BenchError:
        return None


def _compile_name(event: LogEvent) -> str:
    figures = event.figures
    name = "/".join(str(figures[k]) for k in ("family", "key") if k in figures)
    return f"rank {event.rank} {name or event.line[:80]}"
