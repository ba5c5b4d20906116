"""A replayed session as people read it: one row per turn, then both cached shares.

Kept apart from the replay so the numbers can be tested without a console.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from flows.bench.session_replay import TurnNumbers, engine_cached_share, usage_cached_share


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _engine_share(t: TurnNumbers) -> str:
    if t.engine_queries is None or t.engine_hits is None or not t.engine_queries:
        return "-"
    return f"{100 * t.engine_hits / t.engine_queries:.1f}"


def turn_table(turns: Sequence[TurnNumbers], title: str) -> Table:
    """Per turn: prompt and cached tokens, TTFT (= prefill time), prefill and decode speed."""
    table = Table(title=title)
    columns = ("turn", "prompt", "cached", "cached %", "TTFT s", "prefill tok/s", "decode tok/s")
    for name in (*columns, "engine %", "accept len", "ok"):
        table.add_column(name, justify="right")
    for t in turns:
        share = t.cached_tokens / t.prompt_tokens if t.prompt_tokens and t.cached_tokens else 0.0
        table.add_row(
            str(t.turn),
            _num(t.prompt_tokens, "d"),
            _num(t.cached_tokens, "d"),
            "-" if t.cached_tokens is None else f"{100 * share:.1f}",
            _num(t.ttft_s, ".3f"),
            _num(t.prefill_tps, ".0f"),
            _num(t.decode_tps, ".1f"),
            _engine_share(t),
            _num(t.draft_acceptance_len, ".2f"),
            "yes" if t.ok else "FAILED",
        )
    return table


def share_line(turns: Sequence[TurnNumbers]) -> str:
    """The session's cached share from usage and from the engine's prefix-cache counters."""
    usage, engine = usage_cached_share(turns), engine_cached_share(turns)
    said = "not reported" if usage is None else f"{100 * usage:.1f}%"
    counted = "not exported" if engine is None else f"{100 * engine:.1f}%"
    return f"cached share: usage {said}, engine prefix-cache metrics {counted}"
