"""The engine's Prometheus metrics: scrape text summed per metric name, and the names we read."""

from __future__ import annotations

DEFAULT_METRICS = {
    "running": "sparkengine_requests_running",
    "waiting": "sparkengine_requests_waiting",
    "prompt_tokens": "sparkengine_prompt_tokens_total",
    "generation_tokens": "sparkengine_generation_tokens_total",
}


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
