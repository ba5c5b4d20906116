"""The determinism gate: greedy outputs identical in every scenario, and against the previous.

The candidate is booted once. Each prompt is first served alone (the reference); then the same
prompts run all at once, in staggered joins (so steps of every size occur), beside a long
prefill, twice in a row (the second from the prefix cache), beside temperature-1 sampled streams,
and alone again after all that traffic. Tokens are compared by id and logprobs bit for bit; per
prompt the SHA-256 of the tokens and of the logprob bytes is stored, and compared with the
previous release's record when the release declares its outputs unchanged.

Unless `chat` is off, two chat probes go with the short prompts in every scenario (served
alone, all at once, staggered, mixed, cached, beside sampled, again): a /v1/chat/completions
request offering tools and one asking for a JSON-schema response. They are compared like the
completions, plus their canonical response (tool call name and arguments, or content), so a
divergence names `chat_tool` or `chat_json`.

The bundled engine has no per-request cache salt, so after the reference run the short prompts'
full blocks come from the prefix cache in every scenario; the long prompt is first sent in the
mixed scenario, so its prefill really shares steps with the decodes, and its served-alone
reference is taken right after.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from flows.errors import BootError, GateError, SparkgateError
from flows.gates.base import (
    GateContext,
    GateResult,
    GateVerdict,
    History,
    PreviousOutputs,
    api_base_url,
)
from flows.gates.determinism.chat import send
from flows.gates.determinism.plan import plan_steps
from flows.gates.determinism.rules import (
    NAME,
    PREVIOUS_FILE,
    Runs,
    judge,
    previous_copy,
    stored_hashes,
)
from flows.gates.determinism.story import DETERMINISM_STORY, DeterminismStory
from flows.gates.determinism.summary import DeterminismSummary
from flows.gates.files import GateFiles
from flows.gates.harness import failed, run_gate
from flows.gates.outputs import Output
from flows.gates.plan import PlanContext, PlanStep
from flows.gates.prompts import Prompt, chat_probes, long_prompt, named_prompts
from flows.gates.running import running_release
from flows.gates.traffic import Answered, Client, open_client, stream
from flows.spec.release import DeterminismGate

SCENARIOS = 7  # alone, all at once, staggered, mixed, cached, beside sampled, again


@dataclass(frozen=True)
class DeterminismRunner:
    """The determinism gate as the registry lists it."""

    name: str = NAME
    title: str = "determinism gate"
    settings_model: type[DeterminismGate] = DeterminismGate
    summary_model: type[DeterminismSummary] = DeterminismSummary
    boot_failure: str = "boot failed"
    story: DeterminismStory = DETERMINISM_STORY

    def inputs(
        self, context: GateContext, earlier: Mapping[str, GateResult], history: History
    ) -> PreviousOutputs | None:
        """The previous release's hashes and their record (None: nothing to compare with)."""
        del earlier
        return history.previous_outputs(context)

    def plan(self, given: PlanContext) -> list[PlanStep]:
        """What the gate would do on which node (`sparkgate qualify --plan`)."""
        return plan_steps(given)

    def run(
        self,
        context: GateContext,
        settings: DeterminismGate,
        inputs: PreviousOutputs | None,
        files: GateFiles,
    ) -> GateVerdict:
        """Boot the candidate, run every scenario, compare, hash; the cluster is stopped after."""
        prompts = named_prompts(settings.prompts, settings.max_tokens)
        long = long_prompt(settings.long_prompt_tokens, settings.max_tokens)
        chat = chat_probes(settings.max_tokens) if settings.chat else []
        sent = [*prompts, *chat]
        try:
            with running_release(context) as started:
                context.say(f"determinism: {context.release.name} ready in {started.wall_s:.1f} s")
                runs, sampled = asyncio.run(
                    asyncio.wait_for(
                        _traffic(api_base_url(context.cluster), settings, sent, long, context),
                        timeout=settings.timeout_s,
                    )
                )
        except BootError:
            raise  # the harness reports it with its evidence
        except TimeoutError:
            return failed(f"gave up after {settings.timeout_s:g} s (timeout_s)")
        except (SparkgateError, aiohttp.ClientError, ValueError) as error:
            return failed(f"could not run the scenarios: {error}")
        for name, run in runs.items():
            files.write_json(f"scenarios/{name}.json", _raw(run))
        files.write_json("scenarios/sampled-streams.json", [o.model_dump() for o in sampled])
        hashes = inputs.hashes if inputs is not None else None
        previous = context.previous.name if context.previous is not None else None
        summary, outcome, reason = judge(runs, settings, context.release.outputs, previous, hashes)
        files.write_json("hashes.json", stored_hashes(runs["alone"], prompts, long, chat))
        if inputs is not None and context.previous is not None:
            kept = previous_copy(context.previous.name, inputs.record, inputs.hashes)
            files.write_json(PREVIOUS_FILE, kept)
        files.write_json("summary.json", summary.model_dump(mode="json"))
        return GateVerdict(outcome=outcome, reason=reason, summary=summary)


DETERMINISM = DeterminismRunner()


def run_determinism(
    context: GateContext,
    settings: DeterminismGate,
    out_dir: Path,
    *,
    previous: PreviousOutputs | None = None,
) -> GateResult:
    """The gate through the harness, on its own (tests and scripts)."""
    return run_gate(DETERMINISM, context, settings, previous, out_dir)


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
    """Every scenario in order; the long prompt's reference is taken right after `mixed`.

    `prompts` are the short prompts and then the chat probes; sampled streams use the former.
    """
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
        texts = [p for p in prompts if not p.chat]
        greedy, sampled = await _beside_sampled(client, prompts, texts, settings.sampled_streams)
        runs["sampled"] = greedy
        context.advance("scenarios", len(runs), SCENARIOS)
        await step("again", _one_by_one(client, [*prompts, long]))
    return runs, sampled


async def _one_by_one(client: Client, prompts: Sequence[Prompt]) -> list[Answered]:
    return [await send(client, prompt) for prompt in prompts]


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
                send(client, p, delay_s=delays.get(p.id, i * stagger_s))
                for i, p in enumerate(prompts)
            )
        )
    )


async def _beside_sampled(
    client: Client, prompts: Sequence[Prompt], texts: Sequence[Prompt], count: int
) -> tuple[list[Answered], list[Output]]:
    """The greedy prompts at once, with `count` temperature-1 streams (of `texts`) beside them."""
    if not texts:
        raise GateError("no prompts to send")
    sampled = [
        Prompt(id=f"sampled{i}", text=texts[i % len(texts)].text, max_tokens=texts[0].max_tokens)
        for i in range(count)
    ]
    results = await asyncio.gather(
        _together(client, prompts),
        asyncio.gather(*(stream(client, s, temperature=1.0) for s in sampled)),
    )
    return results[0], list(results[1])
