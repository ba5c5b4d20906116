"""Parsing and validating OpenAI-style request bodies into engine inputs.

Pure functions: every invalid field becomes a RequestError naming the parameter, which the
HTTP layer turns into a 400 in OpenAI's error shape. Nothing here can crash the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkengine import tokenizer
from sparkengine.errors import RequestError
from sparkengine.sampling import SamplingParams

MAX_TOP_LOGPROBS = 20
DEFAULT_COMPLETION_TOKENS = 16


@dataclass(frozen=True)
class Parsed:
    """A validated generation request."""

    prompt: list[int]
    params: SamplingParams
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    return_token_ids: bool


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


def completion_prompt(body: dict[str, Any], vocab: int) -> list[int]:
    """`prompt` as text, token ids, or a one-element list of either."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tokenizer.encode(prompt)
    if isinstance(prompt, list) and prompt:
        return _token_list(prompt, vocab)
    raise RequestError("'prompt' must be a string or a non-empty list of token ids", "prompt")


def chat_prompt(body: dict[str, Any]) -> list[int]:
    """`messages` through the chat template."""
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
    return tokenizer.apply_chat_template(pairs)


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise RequestError("'stop' must be a non-empty string or a list of them", "stop")
    return tuple(stop)


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
    body: Any, *, chat: bool, model_names: tuple[str, ...], vocab: int, max_context: int
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
    prompt = chat_prompt(body) if chat else completion_prompt(body, vocab)
    if len(prompt) >= max_context:
        raise RequestError(
            f"prompt has {len(prompt)} tokens; the context is {max_context}", "prompt"
        )
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
    temperature = float(_opt(body, "temperature", "number", 1.0))
    top_p = float(_opt(body, "top_p", "number", 1.0))
    if not 0.0 <= temperature <= 2.0:
        raise RequestError("'temperature' must be between 0 and 2", "temperature")
    if not 0.0 < top_p <= 1.0:
        raise RequestError("'top_p' must be in (0, 1]", "top_p")
    seed = _opt(body, "seed", "int", None)
    if seed is not None and seed < 0:
        raise RequestError("'seed' must be a non-negative integer", "seed")
    stream_options = _opt(body, "stream_options", "dict", {})
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
        stop=_stop(body),
        stream=_opt(body, "stream", "bool", False),
        include_usage=bool(stream_options.get("include_usage", False)),
        return_token_ids=_opt(body, "return_token_ids", "bool", False),
    )
