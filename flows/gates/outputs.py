"""Greedy outputs compared exactly: tokens by id, logprobs bit for bit, and their hashes.

Pure functions only (no I/O), so the determinism gate and the cold-boot spot check decide from
the same rules, and a record can be re-judged from its raw responses. Floats are compared by
their IEEE-754 bytes as received (`-0.0 != 0.0`, a NaN equals the same NaN): "equal tokens with
unequal logprobs is a numeric difference that has not flipped a token yet", so it counts.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Top = list[tuple[str, float]]


class Output(BaseModel):
    """One greedy response, reduced to what is compared."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str = Field(description="Prompt id (p0, ..., long).")
    token_ids: list[int]
    logprobs: list[float | None] = Field(default=[], description="Logprob of each chosen token.")
    top: list[Top | None] = Field(default=[], description="Alternatives per token, as received.")
    text: str = ""
    cached_tokens: int | None = Field(default=None, description="Prompt tokens from the cache.")


class Difference(BaseModel):
    """Where one response first departs from the reference."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str
    index: int = Field(
        description="Index of the first differing generated token (for `content`: character "
        "of a chat probe's canonical response)."
    )
    what: Literal["token", "length", "logprob", "content"]


class ScenarioReport(BaseModel):
    """A scenario's responses against the reference (each prompt served alone)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    identical: int
    differing: int
    first_difference: Difference | None
    differences: list[Difference] = []


def output_from_completion(prompt: str, response: Mapping[str, Any]) -> Output:
    """An Output from a non-streamed /v1/completions body (logprobs and token_ids asked for)."""
    choice = response["choices"][0]
    logprobs = choice.get("logprobs") or {}
    tops = logprobs.get("top_logprobs") or []
    usage = response.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return Output(
        prompt=prompt,
        token_ids=[int(t) for t in choice.get("token_ids") or []],
        logprobs=list(logprobs.get("token_logprobs") or []),
        top=[None if top is None else list(top.items()) for top in tops],
        text=str(choice.get("text") or ""),
        cached_tokens=details.get("cached_tokens"),
    )


def float_bits(value: float | None) -> bytes:
    """The exact bytes of a logprob (a missing one has its own marker)."""
    if value is None:
        return b"\xff" * 8
    return struct.pack("<d", value)


def tokens_hash(output: Output) -> str:
    """SHA-256 of the token ids as little-endian uint32."""
    return hashlib.sha256(b"".join(struct.pack("<I", t) for t in output.token_ids)).hexdigest()


def logprobs_hash(output: Output) -> str:
    """SHA-256 of the chosen tokens' logprobs as little-endian IEEE-754 doubles."""
    return hashlib.sha256(b"".join(float_bits(v) for v in output.logprobs)).hexdigest()


def hashes(outputs: Iterable[Output]) -> dict[str, dict[str, str]]:
    """Per prompt id: {"tokens": sha256, "logprobs": sha256}."""
    return {o.prompt: {"tokens": tokens_hash(o), "logprobs": logprobs_hash(o)} for o in outputs}


def matches_reference(reference: Mapping[str, Mapping[str, Any]], output: Output) -> bool:
    """True when the output hashes as its prompt's reference entry (extra keys ignored)."""
    entry = reference.get(output.prompt)
    if entry is None:
        return False
    mine = hashes([output])[output.prompt]
    return all(entry.get(key) == value for key, value in mine.items())


def first_difference(reference: Output, other: Output) -> Difference | None:
    """The first token that differs, else the first logprob (or alternative) that differs."""
    ref, got = reference.token_ids, other.token_ids
    for index, (a, b) in enumerate(zip(ref, got, strict=False)):
        if a != b:
            return Difference(prompt=reference.prompt, index=index, what="token")
    if len(ref) != len(got):
        return Difference(prompt=reference.prompt, index=min(len(ref), len(got)), what="length")
    at = _first_logprob_difference(reference, other)
    if at is not None:
        return Difference(prompt=reference.prompt, index=at, what="logprob")
    return None


def _first_logprob_difference(reference: Output, other: Output) -> int | None:
    if len(reference.logprobs) != len(other.logprobs) or len(reference.top) != len(other.top):
        return min(len(reference.logprobs), len(other.logprobs), len(reference.top), len(other.top))
    for index, (a, b) in enumerate(zip(reference.logprobs, other.logprobs, strict=True)):
        if float_bits(a) != float_bits(b):
            return index
    for index, (a_top, b_top) in enumerate(zip(reference.top, other.top, strict=True)):
        if _top_bits(a_top) != _top_bits(b_top):
            return index
    return None


def _top_bits(top: Top | None) -> list[tuple[str, bytes]] | None:
    return None if top is None else [(token, float_bits(value)) for token, value in top]


def top_token_agreement(
    current: Mapping[str, Sequence[int]], previous: Mapping[str, Sequence[int]]
) -> float | None:
    """Share of generated positions where both releases chose the same token (None: no data).

    Positions are counted up to the longer output of each prompt, so a shorter output
    disagrees on the rest.
    """
    agree = total = 0
    for prompt, tokens in current.items():
        before = previous.get(prompt)
        if before is None:
            continue
        agree += sum(1 for a, b in zip(tokens, before, strict=False) if a == b)
        total += max(len(tokens), len(before))
    if total == 0:
        return None
    return agree / total


def max_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    """Most requests in flight at once, from (sent, answered) times (pure sweep)."""
    marks = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = best = 0
    for _, step in marks:  # an end at the same instant as a start sorts first (-1 < 1)
        running += step
        best = max(best, running)
    return best


_SHOWN = 6


def shown_names(items: Sequence[str]) -> str:
    """The first few names, comma-separated, and how many more there are."""
    shown = ", ".join(items[:_SHOWN])
    return shown if len(items) <= _SHOWN else f"{shown} and {len(items) - _SHOWN} more"
