"""The determinism gate: greedy outputs identical in every scenario, and against the previous.

The candidate is booted once. Each prompt is first served alone (the reference); then the same
prompts run all at once, in staggered joins (so steps of every size occur), beside a long
prefill, twice in a row (the second from the prefix cache), beside temperature-1 sampled streams,
and alone again after all that traffic. Tokens are compared by id and logprobs bit for bit; per
prompt the SHA-256 of the tokens and of the logprob bytes is stored, and compared with the
previous release's record when the release declares its outputs unchanged.

The bundled engine has no per-request cache salt, so after the reference run the short prompts'
full blocks come from the prefix cache in every scenario; the long prompt is first sent in the
mixed scenario, so its prefill really shares steps with the decodes, and its served-alone
reference is taken right after.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from flows.errors import BootError, GateError, SparkgateError
from flows.gates.base import GateContext, GateResult, Outcome, api_base_url
from flows.gates.outputs import (
    Output,
    ScenarioReport,
    compare_scenario,
    hashes,
    max_overlap,
    output_from_completion,
)
from flows.gates.prompts import Prompt, long_prompt, named_prompts
from flows.gates.running import running_release, write_json
from flows.gates.traffic import Answered, Client, complete, open_client, stream
from flows.gates.verdicts import PreviousReport, against_previous, determinism_verdict
from flows.spec.release import DeterminismGate

GATE = "determinism"
Runs = dict[str, list[Answered]]

SCENARIOS = 7  # alone, all at once, staggered, mixed, cached, beside sampled, again


def run_determinism(
    context: GateContext,
    settings: DeterminismGate,
    out_dir: Path,
    *,
    previous_hashes: Mapping[str, Mapping[str, Any]] | None = None,
) -> GateResult:
    """Boot the candidate, run every scenario, compare, hash; the cluster is stopped after."""
    started_at = datetime.now(UTC)
    clock = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    prompts = named_prompts(settings.prompts, settings.max_tokens)
    long = long_prompt(settings.long_prompt_tokens, settings.max_tokens)

    def failed(reason: str, files: list[str], evidence: list[str]) -> GateResult:
        return GateResult(
            gate=GATE, outcome=Outcome.FAILED, reason=reason, started_at=started_at,
            seconds=time.monotonic() - clock, files=files, evidence=evidence,
        )  # fmt: skip

    try:
        with running_release(context) as started:
            context.say(f"determinism: {context.release.name} ready in {started.wall_s:.1f} s")
            runs, sampled = asyncio.run(
                asyncio.wait_for(
                    _traffic(api_base_url(context.cluster), settings, prompts, long, context),
                    timeout=settings.timeout_s,
                )
            )
    except BootError as error:
        evidence = [str(error.evidence)] if error.evidence else []
        return failed(f"boot failed: {error}", [], evidence)
    except TimeoutError:
        return failed(f"gave up after {settings.timeout_s:g} s (timeout_s)", [], [])
    except (SparkgateError, aiohttp.ClientError, ValueError) as error:
        return failed(f"could not run the scenarios: {error}", [], [])

    files = [write_json(out_dir, f"scenarios/{name}.json", _raw(run)) for name, run in runs.items()]
    files.append(
        write_json(out_dir, "scenarios/sampled-streams.json", [o.model_dump() for o in sampled])
    )
    summary, outcome, reason = judge(runs, context, settings, previous_hashes)
    files.append(write_json(out_dir, "hashes.json", stored_hashes(runs["alone"], prompts, long)))
    files.append(write_json(out_dir, "summary.json", summary))
    return GateResult(
        gate=GATE, outcome=outcome, reason=reason, started_at=started_at,
        seconds=time.monotonic() - clock, summary=summary, files=files,
    )  # fmt: skip


def judge(
    runs: Runs,
    context: GateContext,
    settings: DeterminismGate,
    previous_hashes: Mapping[str, Mapping[str, Any]] | None,
) -> tuple[dict[str, Any], Outcome, str]:
    """The summary and verdict from the raw runs (pure; also what a verifier recomputes)."""
    outputs = {
        name: [output_from_completion(a.prompt, a.response) for a in run]
        for name, run in runs.items()
    }
    reference = {o.prompt: o for o in outputs["alone"]}
    scenarios = [
        compare_scenario(name, reference, outs) for name, outs in outputs.items() if name != "alone"
    ]
    previous = against_previous(
        outputs["alone"],
        previous_hashes,
        change=context.release.outputs.change,
        change_reason=context.release.outputs.reason,
        enabled=settings.against_previous and context.previous is not None,
        previous_name=context.previous.name if context.previous else "the previous release",
    )
    passed, reason = determinism_verdict(scenarios, previous)
    summary = _summary(runs, outputs["alone"], scenarios, previous, settings)
    return summary, Outcome.PASSED if passed else Outcome.FAILED, reason


def stored_hashes(
    alone: Sequence[Answered], prompts: Sequence[Prompt], long: Prompt
) -> dict[str, Any]:
    """hashes.json: per prompt the two hashes, plus the tokens and text a successor compares."""
    texts = {p.id: p for p in [*prompts, long]}
    outputs = [output_from_completion(a.prompt, a.response) for a in alone]
    digests = hashes(outputs)
    return {
        o.prompt: {
            **digests[o.prompt],
            "token_ids": o.token_ids,
            "prompt": texts[o.prompt].text
            if o.prompt != long.id
            else f"<long prompt, {len(long.text)} chars>",
            "max_tokens": texts[o.prompt].max_tokens,
        }
        for o in outputs
    }


def _summary(
    runs: Runs,
    alone: Sequence[Output],
    scenarios: Sequence[ScenarioReport],
    previous: PreviousReport,
    settings: DeterminismGate,
) -> dict[str, Any]:
    staggered = runs.get("staggered", [])
    cached = list(runs.get("cached", []))[1::2]
    return {
        "prompts": len(alone),
        "max_tokens": settings.max_tokens,
        "scenarios": [s.summary() for s in scenarios],
        "against_previous": previous.model_dump(),
        "hashes": hashes(alone),
        "staggered_overlap": max_overlap([(a.sent_s, a.answered_s) for a in staggered]),
        "staggered_requests": len(staggered),
        "cached_tokens": [
            output_from_completion(a.prompt, a.response).cached_tokens for a in cached
        ],
        "sampled_streams": settings.sampled_streams,
    }


def _raw(run: Sequence[Answered]) -> list[dict[str, Any]]:
    return [
        {
            "prompt": a.prompt,
            "sent_s": round(a.sent_s, 4),
            "answered_s": round(a.answered_s, 4),
            "response": a.response,
        }
        for a in run
    ]


async def _traffic(
    base_url: str,
    settings: DeterminismGate,
    prompts: list[Prompt],
    long: Prompt,
    context: GateContext,
) -> tuple[Runs, list[Output]]:
    """Every scenario in order; the long prompt's reference is taken right after `mixed`."""
    top = settings.top_logprobs if settings.logprobs else 0
    stagger = settings.stagger_ms / 1000
    runs: Runs = {}
    async with open_client(base_url, top) as client:

        async def step(name: str, work: Any) -> list[Answered]:
            context.say(f"determinism: {name}")
            answered: list[Answered] = await work
            runs[name] = answered
            context.advance("scenarios", len(runs), SCENARIOS)
            return answered

        await step("alone", _one_by_one(client, prompts))
        await step("all_at_once", _together(client, prompts))
        await step("staggered", _together(client, prompts, stagger))
        await step("mixed", _together(client, [*prompts, long], 0.0, {long.id: max(stagger, 0.05)}))
        runs["alone"].extend(await _one_by_one(client, [long]))
        await step("cached", _one_by_one(client, [p for p in prompts for _ in (1, 2)]))
        greedy, sampled = await _beside_sampled(client, prompts, settings.sampled_streams)
        runs["sampled"] = greedy
        context.advance("scenarios", len(runs), SCENARIOS)
        await step("again", _one_by_one(client, [*prompts, long]))
    return runs, sampled


async def _one_by_one(client: Client, prompts: Sequence[Prompt]) -> list[Answered]:
    return [await complete(client, prompt) for prompt in prompts]


async def _together(
    client: Client,
    prompts: Sequence[Prompt],
    stagger_s: float = 0.0,
    delays: Mapping[str, float] | None = None,
) -> list[Answered]:
    """All prompts concurrently; the i-th joins after i * stagger_s (or its own delay)."""
    delays = delays or {}
    return list(
        await asyncio.gather(
            *(
                complete(client, p, delay_s=delays.get(p.id, i * stagger_s))
                for i, p in enumerate(prompts)
            )
        )
    )


async def _beside_sampled(
    client: Client, prompts: Sequence[Prompt], count: int
) -> tuple[list[Answered], list[Output]]:
    """The greedy prompts at once, with `count` temperature-1 streams in the same steps."""
    if not prompts:
        raise GateError("no prompts to send")
    sampled = [
        Prompt(
            id=f"sampled{i}", text=prompts[i % len(prompts)].text, max_tokens=prompts[0].max_tokens
        )
        for i in range(count)
    ]
    results = await asyncio.gather(
        _together(client, prompts),
        asyncio.gather(*(stream(client, s, temperature=1.0) for s in sampled)),
    )
    return results[0], list(results[1])
