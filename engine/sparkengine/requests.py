"""Parsing and validating OpenAI-style request bodies into engine inputs.

Pure functions: every invalid field becomes a RequestError naming the parameter, which the
HTTP layer turns into a 400 in OpenAI's error shape. Nothing here can crash the server, and
nothing here is unbounded: stop lists are capped in number and length, and a text prompt longer
than the context is refused before it is tokenized.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sparkengine import answer_size, tokenizer
from sparkengine.errors import RequestError
from sparkengine.sampling import MIN_TEMPERATURE, SamplingParams
from sparkengine.structured import Structure, parse_structure

MAX_TOP_LOGPROBS = 20
DEFAULT_COMPLETION_TOKENS = 16
MAX_TEMPERATURE = 2.0


@dataclass(frozen=True)
class Limits:
    """Caps on what one request may ask, so no request can hold the server for long."""

    max_stop: int = 16
    max_stop_chars: int = 256


@dataclass(frozen=True)
class Parsed:
    """A validated generation request."""

    prompt: list[int]
    params: SamplingParams
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    return_token_ids: bool
    structure: Structure | None = None  # chat: tools or a JSON response format


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _opt(body: dict[str, Any], name: str, kind: str, default: Any = None) -> Any:
    value = body.get(name)
    if value is None:
        return default
    ok = {
        "bool": isinstance(value, bool),
        "int": _is_int(value),
        "number": _is_int(value) or isinstance(value, float),
        "dict": isinstance(value, dict),
    }[kind]
    if not ok:
        raise RequestError(f"'{name}' must be a {kind}, got {type(value).__name__}", name)
    return value


def _token_list(value: list[Any], vocab: int) -> list[int]:
    if not all(_is_int(t) and 0 <= t < vocab for t in value):
        raise RequestError(f"prompt token ids must be integers in [0, {vocab})", "prompt")
    return list(value)


def _too_long(count: int, max_context: int | None) -> None:
    if max_context is not None and count >= max_context:
        raise RequestError(f"prompt has {count} tokens; the context is {max_context}", "prompt")


def completion_prompt(
    body: dict[str, Any], vocab: int, max_context: int | None = None
) -> list[int]:
    """`prompt` as text, token ids, or a one-element list of either.

    With `max_context`, a prompt that cannot fit is refused before any tokenizing.
    """
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        _too_long(1 + len(prompt), max_context)  # one token per character, plus BOS
        return tokenizer.encode(prompt)
    if isinstance(prompt, list) and prompt:
        _too_long(len(prompt), max_context)
        return _token_list(prompt, vocab)
    raise RequestError("'prompt' must be a string or a non-empty list of token ids", "prompt")


def chat_prompt(body: dict[str, Any], max_context: int | None = None) -> list[int]:
    """`messages` through the chat template (refused before templating when it cannot fit)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list", "messages")
    pairs = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RequestError(f"messages[{i}] must be an object with a string 'role'", "messages")
        content = message.get("content")
        if isinstance(content, list):
            parts = [p.get("text") if isinstance(p, dict) else None for p in content]
            if not all(isinstance(p, str) for p in parts):
                raise RequestError(f"messages[{i}].content parts must be text", "messages")
            content = "".join(parts)  # type: ignore[arg-type]
        if not isinstance(content, str):
            raise RequestError(f"messages[{i}].content must be a string", "messages")
        pairs.append((message["role"], content))
    _too_long(sum(len(role) + len(text) for role, text in pairs), max_context)
    return tokenizer.apply_chat_template(pairs)


def _stop(body: dict[str, Any], limits: Limits) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list):
        raise RequestError("'stop' must be a non-empty string or a list of them", "stop")
    if len(stop) > limits.max_stop:
        raise RequestError(
            f"'stop' has {len(stop)} strings; at most {limits.max_stop} are allowed", "stop"
        )
    if not all(isinstance(s, str) and s for s in stop):
        raise RequestError("'stop' must be a non-empty string or a list of them", "stop")
    longest = max(len(s) for s in stop) if stop else 0
    if longest > limits.max_stop_chars:
        raise RequestError(
            f"a stop string has {longest} characters; at most {limits.max_stop_chars} are allowed",
            "stop",
        )
    return tuple(stop)


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    """A finite number in [low, high] (JSON's NaN and Infinity, and huge integers, are refused)."""
    raw = _opt(body, name, "number", default)
    try:
        value = float(raw)
    except OverflowError:
        value = math.inf
    if not (math.isfinite(value) and low <= value <= high):
        raise RequestError(f"'{name}' must be a finite number between {low:g} and {high:g}", name)
    return value


def _temperature(body: dict[str, Any]) -> float:
    """0 is greedy; a positive temperature below MIN_TEMPERATURE samples at MIN_TEMPERATURE."""
    value = _number(body, "temperature", 1.0, 0.0, MAX_TEMPERATURE)
    return value if value == 0.0 else max(value, MIN_TEMPERATURE)


def _logprobs(body: dict[str, Any], chat: bool) -> int | None:
    if chat:
        wanted = _opt(body, "logprobs", "bool", False)
        top = _opt(body, "top_logprobs", "int", 0)
        count = top if wanted else None
    else:
        count = _opt(body, "logprobs", "int", None)
    if count is not None and not 0 <= count <= MAX_TOP_LOGPROBS:
        name = "top_logprobs" if chat else "logprobs"
        raise RequestError(f"'{name}' must be between 0 and {MAX_TOP_LOGPROBS}", name)
    return count


def parse(
    body: Any,
    *,
    chat: bool,
    model_names: tuple[str, ...],
    vocab: int,
    max_context: int,
    limits: Limits | None = None,
) -> Parsed:
    """Validate a /v1/completions or /v1/chat/completions body."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    if body.get("model") not in model_names:
        raise RequestError(
            f"model {body.get('model')!r} does not exist (served: {model_names[0]})",
            "model",
            "model_not_found",
        )
    if _opt(body, "n", "int", 1) != 1:
        raise RequestError("only n=1 is supported", "n")
    if _opt(body, "echo", "bool", False):
        raise RequestError("echo is not supported", "echo")
    limits = limits or Limits()
    stop = _stop(body, limits)
    prompt = chat_prompt(body, max_context) if chat else completion_prompt(body, vocab, max_context)
    _too_long(len(prompt), max_context)
    name = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
    default = max_context - len(prompt) if chat else DEFAULT_COMPLETION_TOKENS
    max_tokens = _opt(body, name, "int", default)
    if max_tokens < 1:
        raise RequestError(f"'{name}' must be at least 1, got {max_tokens}", name)
    if len(prompt) + max_tokens > max_context:
        raise RequestError(
            f"prompt ({len(prompt)} tokens) + {name} ({max_tokens}) exceeds the context "
            f"of {max_context} tokens",
            name,
        )
    temperature = _temperature(body)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0.0:
        raise RequestError("'top_p' must be in (0, 1]", "top_p")
    seed = _opt(body, "seed", "int", None)
    if seed is not None and seed < 0:
        raise RequestError("'seed' must be a non-negative integer", "seed")
    stream_options = _opt(body, "stream_options", "dict", {})
    structure = parse_structure(body) if chat else None
    answer_size.check(structure, max_tokens)  # before anything is generated or built
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        ignore_eos=_opt(body, "ignore_eos", "bool", False),
        logprobs=_logprobs(body, chat),
    )
    return Parsed(
        prompt=prompt,
        params=params,
        stop=stop,
        stream=_opt(body, "stream", "bool", False),
        include_usage=bool(stream_options.get("include_usage", False)),
        return_token_ids=_opt(body, "return_token_ids", "bool", False),
        structure=structure,
    )
