"""The engine's Prometheus metrics: scrape text summed per metric name, and the names we read.

Besides gauges and counters, an engine may report its own time per step as a histogram or
summary (`step_seconds`, wall) and the CPU time of those steps (`step_cpu_seconds`): the
benchmark reads their `_sum` and `_count` around every sample, so a point also gets the engine's
step time, which the machine's scheduler moves far less than the client's clock.
"""

from __future__ import annotations

from collections.abc import Mapping

SUMMARIES = ("step_seconds", "step_cpu_seconds")
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


def engine_step_times(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Mean engine step time (ms) between two scrapes: wall and CPU, where the engine says.

    Empty when no step ran in between or the engine exports neither summary.
    """
    steps = after.get("step_seconds_count", 0.0) - before.get("step_seconds_count", 0.0)
    out: dict[str, float] = {}
    if steps <= 0:
        return out
    for key, metric in (("step_seconds", "engine_step_ms"), ("step_cpu_seconds", "engine_cpu_ms")):
        if f"{key}_sum" in before and f"{key}_sum" in after:
            out[metric] = 1e3 * (after[f"{key}_sum"] - before[f"{key}_sum"]) / steps
    return {metric: value for metric, value in out.items() if value > 0}


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
