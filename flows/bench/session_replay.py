"""Replay a recorded session against a release, turn by turn, and the numbers of each turn.

A turn is sent as recorded (messages or prompt, sampling settings) with three changes, so every
replay does the same work on any release: the served model's name, `max_tokens` set to the
tokens the recorded turn produced with `ignore_eos` (a release that stops earlier would
otherwise look faster), and one salt per replay at the start of every turn's first message or
prompt, so each replay starts with a cold prefix cache and its cached share is the session's
own, not an earlier replay's (token-id prompts are sent unsalted). Turns go back to back, or
after the recorded idle gaps (capped).

Per turn: prompt and cached tokens (usage), TTFT, prefill time, uncached prefill tok/s, decode
tok/s, and, where the engine's metrics name them, its prefix-cache counters and draft acceptance
over the turn. TTFT is the first chunk carrying a token (a chat stream opens with a chunk that
carries only the role, sent before any work). The OpenAI wire format carries no prompt time and
the bundled engine adds none, so the prefill time is that TTFT: it includes one sampling step and
the request's overhead.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from flows.bench.client import RequestSpec
from flows.bench.report import Receipt
from flows.bench.session_file import Session, Turn
from flows.engine_api.metrics import draft_acceptance

Pace = Literal["back_to_back", "recorded"]
Scrape = Callable[[], Mapping[str, float]]
DROPPED = ("stream", "stream_options", "max_completion_tokens", "n", "return_token_ids")
"""Request fields the replay sets itself (or that would change the work: `n` choices)."""


class TurnResult(BaseModel):
    """One replayed turn: its receipt and the engine's counters around it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turn: int = Field(description="index of the recorded turn")
    receipt: Receipt = Field(description="the client's receipt of the replayed request")
    before: dict[str, float] = Field(default_factory=dict, description="counters before")
    after: dict[str, float] = Field(default_factory=dict, description="counters after")


class TurnNumbers(BaseModel):
    """What one turn measured (None: not reported)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turn: int
    ok: bool
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    prefill_s: float | None = Field(default=None, description="TTFT (no engine prompt time)")
    prefill_tps: float | None = Field(default=None, description="uncached prompt tokens / TTFT")
    decode_tps: float | None = Field(default=None, description="1 / time per output token")
    engine_queries: float | None = Field(default=None, description="prefix-cache lookups (tokens)")
    engine_hits: float | None = Field(default=None, description="prefix-cache hits (tokens)")
    draft_acceptance_len: float | None = None


def output_tokens(turn: Turn, default: int) -> int:
    """Tokens the replay asks for: what the recorded turn produced, else what it asked for."""
    produced = turn.usage.get("completion_tokens")
    if isinstance(produced, int) and produced > 0:
        return produced
    for key in ("max_tokens", "max_completion_tokens"):
        asked = turn.body.get(key)
        if isinstance(asked, int) and asked > 0:
            return asked
    return default


def salt_for(*parts: str) -> str:
    """A salt unique to `parts` whose first characters already differ (a prefix cache matches
    whole blocks from the start, so a shared opening would be a hit), of one length always."""
    return f"[{hashlib.sha256('/'.join(parts).encode()).hexdigest()[:16]}]\n"


def _salted(body: dict[str, JsonValue], salt: str) -> dict[str, JsonValue]:
    """The body with `salt` before its first message or its prompt text (token-id prompts kept)."""
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        first = dict(messages[0])
        content = first.get("content")
        if isinstance(content, str):
            first["content"] = salt + content
        elif isinstance(content, list):
            first["content"] = [{"type": "text", "text": salt}, *content]
        return {**body, "messages": [first, *messages[1:]]}
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return {**body, "prompt": salt + prompt}
    return body


def turn_request(turn: Turn, *, model: str | None, salt: str, default_tokens: int) -> RequestSpec:
    """The replayed request of one turn (see the module's docstring for what changes)."""
    body = {k: v for k, v in turn.body.items() if k not in DROPPED}
    if model is not None:
        body["model"] = model
    body["max_tokens"] = output_tokens(turn, default_tokens)
    body["ignore_eos"] = True
    if salt:  # every turn: each repeats the first message, and the history must stay a prefix
        body = _salted(body, salt)
    return RequestSpec(path=turn.path, body=body)


def due_gap(turn: Turn, pace: Pace, max_gap_s: float) -> float:
    """Seconds to wait before sending a turn, after the previous one ended."""
    return min(turn.gap_s, max_gap_s) if pace == "recorded" else 0.0


def replay(
    session: Session,
    *,
    send: Callable[[RequestSpec], Receipt],
    scrape: Scrape | None = None,
    model: str | None = None,
    pace: Pace = "back_to_back",
    max_gap_s: float = 60.0,
    salt: str = "",
    turns: int | None = None,
    default_tokens: int = 64,
    sleep: Callable[[float], None] = time.sleep,
) -> list[TurnResult]:
    """Send the session's turns in order, one at a time; a failed turn does not stop it."""
    results = []
    for turn in session.turns[:turns]:
        if turn.status != 200:  # the agent's own failed requests are not the session's work
            continue
        spec = turn_request(turn, model=model, salt=salt, default_tokens=default_tokens)
        if (gap := due_gap(turn, pace, max_gap_s)) > 0:
            sleep(gap)
        before = dict(scrape()) if scrape else {}
        receipt = send(spec)
        after = dict(scrape()) if scrape else {}
        results.append(TurnResult(turn=turn.index, receipt=receipt, before=before, after=after))
    return results


def _delta(result: TurnResult, key: str) -> float | None:
    if key in result.before and key in result.after:
        return result.after[key] - result.before[key]
    return None


def turn_numbers(result: TurnResult) -> TurnNumbers:
    """The numbers of one replayed turn, from its receipt and counters alone."""
    r = result.receipt
    tpot = r.tpot_s
    uncached = (r.prompt_tokens or 0) - (r.cached_tokens or 0)
    # the first chunk with a token: a chat stream opens with a role-only chunk before any work
    ttft = r.first_token_s if r.first_token_s is not None else r.ttft_s
    return TurnNumbers(
        turn=result.turn,
        ok=r.ok,
        prompt_tokens=r.prompt_tokens,
        cached_tokens=r.cached_tokens,
        completion_tokens=r.completion_tokens,
        ttft_s=ttft,
        prefill_s=ttft,
        prefill_tps=uncached / ttft if ttft and r.prompt_tokens else None,
        decode_tps=1.0 / tpot if tpot else None,
        engine_queries=_delta(result, "prefix_cache_queries"),
        engine_hits=_delta(result, "prefix_cache_hits"),
        draft_acceptance_len=draft_acceptance(result.before, result.after).get(
            "draft_acceptance_len"
        ),
    )


def usage_cached_share(turns: Sequence[TurnNumbers]) -> float | None:
    """Cached prompt tokens / prompt tokens over the session, from usage (None: not reported)."""
    reported = [t for t in turns if t.cached_tokens is not None and t.prompt_tokens]
    prompt = sum(t.prompt_tokens or 0 for t in reported)
    return sum(t.cached_tokens or 0 for t in reported) / prompt if reported and prompt else None


def engine_cached_share(turns: Sequence[TurnNumbers]) -> float | None:
    """Prefix-cache hits / queries over the session, from the engine's counters."""
    counted = [t for t in turns if t.engine_queries is not None and t.engine_hits is not None]
    queries = sum(t.engine_queries or 0.0 for t in counted)
    return sum(t.engine_hits or 0.0 for t in counted) / queries if counted and queries else None


PER_TURN = ("prompt_tokens", "cached_tokens", "ttft_s", "prefill_s", "decode_tps")
"""Per-turn numbers kept in a sample's metrics as `<name>@t<NN>` (shown per turn, never gated)."""


def session_metrics(turns: Sequence[TurnNumbers]) -> dict[str, float]:
    """A sample's metrics: mean TTFT and time per output token over the turns (compared),
    both cached shares, and every turn's numbers under `<name>@t<NN>`."""
    out: dict[str, float] = {}
    ttfts = [t.ttft_s for t in turns if t.ttft_s is not None]
    decode = [t.decode_tps for t in turns if t.decode_tps]
    if ttfts:
        out["ttft_s"] = float(np.mean(ttfts))
    if decode:
        out["tpot_ms"] = 1e3 * float(np.mean([1.0 / rate for rate in decode]))
    for key, share in (
        ("cached_share", usage_cached_share(turns)),
        ("engine_cached_share", engine_cached_share(turns)),
    ):
        if share is not None:
            out[key] = share
    for t in turns:
        for name in PER_TURN:
            value = getattr(t, name)
            if value is not None:
                out[f"{name}@t{t.turn:02d}"] = float(value)
    return out
