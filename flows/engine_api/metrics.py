"""The engine's Prometheus metrics: scrape text summed per metric name, and the names we read.

Besides gauges and counters, an engine may report its own time per step as a histogram or
summary (`step_seconds`, wall) and the CPU time of those steps (`step_cpu_seconds`): the
benchmark reads their `_sum` and `_count` around every sample, so a point also gets the engine's
step time, which the machine's scheduler moves far less than the client's clock. An engine's
time per output token (`token_seconds`, one observation per request) is reported under its own
name: under speculative decoding a step yields several tokens, so the two differ by the draft
acceptance length.
"""

from __future__ import annotations

from collections.abc import Mapping

SUMMARIES = ("step_seconds", "step_cpu_seconds", "token_seconds")
"""Profile keys that name a histogram or summary: we read its `_sum` and `_count`."""


def scrape_names(profile: Mapping[str, str | None]) -> dict[str, str]:
    """Keys we read -> exported names; a summary key gives `<key>_sum` and `<key>_count`."""
    names: dict[str, str] = {}
    for key, name in profile.items():
        if not name:
            continue
        if key in SUMMARIES:
            names[f"{key}_sum"], names[f"{key}_count"] = f"{name}_sum", f"{name}_count"
        else:
            names[key] = name
    return names


DEFAULT_METRICS = scrape_names(
    {
        "running": "sparkengine_requests_running",
        "waiting": "sparkengine_requests_waiting",
        "prompt_tokens": "sparkengine_prompt_tokens_total",
        "generation_tokens": "sparkengine_generation_tokens_total",
        "step_seconds": "sparkengine_step_seconds",
        "step_cpu_seconds": "sparkengine_step_cpu_seconds",
    }
)

OPTIONAL_METRICS = {
    "prefix_cache_queries": "sparkengine_prefix_cache_queries_total",
    "prefix_cache_hits": "sparkengine_prefix_cache_hits_total",
}
"""Read when exported, never reported missing: the prefix-cache counters a session replay checks
its cached share against."""


def engine_step_times(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Mean engine step time (ms) between two scrapes, wall and CPU, and the mean time per
    output token of the requests finished in between, each where the engine says.

    Empty when nothing was observed in between or the engine exports none of the summaries.
    """
    out = _mean_ms(before, after, "token_seconds", "token_seconds", "engine_tpot_ms")
    for key, metric in (("step_seconds", "engine_step_ms"), ("step_cpu_seconds", "engine_cpu_ms")):
        out |= _mean_ms(before, after, key, "step_seconds", metric)
    return out


def _mean_ms(
    before: Mapping[str, float], after: Mapping[str, float], key: str, counted: str, metric: str
) -> dict[str, float]:
    """`{metric: mean ms}` of summary `key` over the observations of `counted` between two
    scrapes; empty when nothing was observed or the engine exports neither."""
    count = after.get(f"{counted}_count", 0.0) - before.get(f"{counted}_count", 0.0)
    if count <= 0 or f"{key}_sum" not in before or f"{key}_sum" not in after:
        return {}
    mean = 1e3 * (after[f"{key}_sum"] - before[f"{key}_sum"]) / count
    return {metric: mean} if mean > 0 else {}


def draft_acceptance(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Mean tokens per verification step under speculative decoding, between two scrapes.

    1 + accepted draft tokens / drafts (the bonus token counts), from the engine's counters
    (`spec_drafts`, `spec_accepted_tokens`). Empty when the engine drafts nothing or exports
    neither: a time per output token then already is a time per step.
    """
    keys = ("spec_drafts", "spec_accepted_tokens")
    if not all(key in before and key in after for key in keys):
        return {}
    drafts = after["spec_drafts"] - before["spec_drafts"]
    accepted = after["spec_accepted_tokens"] - before["spec_accepted_tokens"]
    return {"draft_acceptance_len": 1.0 + accepted / drafts} if drafts > 0 else {}


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum every sample of each metric name over its label sets (`_bucket` etc. kept apart)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, rest = line.partition(" ") if "{" not in line else line.partition("}")
        name = name_part.split("{")[0].strip()
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        values[name] = values.get(name, 0.0) + value
    return values
