"""The determinism gate's chat probes: send them, and reduce an answer to what is compared.

A chat probe (a tool call, a JSON-schema response) is compared like a completion: its token ids
(where the server returns them) and logprobs bit for bit, and besides those its *canonical
response*: the content, the reasoning, and each tool call's function name and arguments (parsed
as JSON and written with sorted keys, so only a different call differs, never a different
spelling of the same one), plus the finish reason. Tool-call ids are fresh per response and are
left out. The canonical response is hashed (`content` in the hashes) and a difference in it is
reported as a `content` difference at the first differing character.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from flows.engine_api.wire import ChatCompletion
from flows.errors import GateError
from flows.gates.outputs import Output, output_from_completion
from flows.gates.prompts import CHAT_IDS, Prompt, chat_body
from flows.gates.traffic import Answered, Client, complete

_ERROR_CHARS = 300


async def send(client: Client, prompt: Prompt, *, delay_s: float = 0.0) -> Answered:
    """One greedy request of either kind: a completion, or a chat probe."""
    if not prompt.chat:
        return await complete(client, prompt, delay_s=delay_s)
    return await chat_complete(client, prompt, delay_s=delay_s)


async def chat_complete(client: Client, prompt: Prompt, *, delay_s: float = 0.0) -> Answered:
    """One greedy (temperature 0) chat probe, sent after `delay_s`; its raw body kept."""
    if delay_s > 0:
        await asyncio.sleep(delay_s)
    sent = client.clock()
    url = f"{client.base_url}/v1/chat/completions"
    body = chat_body(prompt, client.model, client.top_logprobs)
    async with client.session.post(url, json=body) as response:
        text = await response.text()
        if response.status != 200:
            raise GateError(
                f"chat probe {prompt.id} ({prompt.kind}): HTTP {response.status}: "
                f"{text[:_ERROR_CHARS]}"
            )
    answered = client.clock()
    try:
        parsed = json.loads(text)
    except ValueError as error:
        raise GateError(f"chat probe {prompt.id}: the answer is not JSON: {error}") from error
    if not isinstance(parsed, dict) or not parsed.get("choices"):
        raise GateError(f"chat probe {prompt.id}: no choices in the answer: {text[:_ERROR_CHARS]}")
    return Answered(prompt.id, sent, answered, parsed)


def _arguments(text: str) -> Any:
    """A tool call's arguments as JSON when they are JSON (else the text as sent)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def canonical(response: Mapping[str, Any]) -> str:
    """The chat answer as compared: content, reasoning, tool calls (name, arguments), finish.

    Raises:
        pydantic.ValidationError: if the body is not a chat completion (a ValueError).
    """
    choice = ChatCompletion.model_validate(response).choices[0]
    message = choice.message
    calls = [
        {"name": call.function.name, "arguments": _arguments(call.function.arguments)}
        for call in message.tool_calls or []
    ]
    answer = {
        "content": message.content,
        "reasoning": message.reasoning_content or message.reasoning,
        "tool_calls": calls,
        "finish_reason": choice.finish_reason,
    }
    return json.dumps(answer, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_hash(output: Output) -> str:
    """SHA-256 of a chat probe's canonical response (its Output's text)."""
    return hashlib.sha256(output.text.encode()).hexdigest()


def _number(logprob: float | None) -> float:
    """An alternative's logprob (a missing one as NaN, which compares equal to itself by bits)."""
    return float("nan") if logprob is None else logprob


def output_from_chat(prompt: str, response: Mapping[str, Any]) -> Output:
    """An Output from a non-streamed chat body: token ids, logprobs, canonical response as text."""
    choice = ChatCompletion.model_validate(response).choices[0]
    entries = (choice.logprobs.content if choice.logprobs else None) or []
    usage = response.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return Output(
        prompt=prompt,
        token_ids=list(choice.token_ids or []),
        logprobs=[entry.logprob for entry in entries],
        top=[[(alt.token, _number(alt.logprob)) for alt in e.top_logprobs] for e in entries],
        text=canonical(response),
        cached_tokens=details.get("cached_tokens"),
    )


def output_of(answered: Answered) -> Output:
    """The compared Output of any greedy answer (the prompt id says which kind it is)."""
    if answered.prompt in CHAT_IDS:
        return output_from_chat(answered.prompt, answered.response)
    return output_from_completion(answered.prompt, answered.response)
