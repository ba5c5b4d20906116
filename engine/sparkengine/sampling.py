"""Choosing the next token from a row of log-probabilities.

Temperature 0 is greedy (the first maximum). Otherwise temperature and top-p reshape the
distribution and the request's own seeded generator draws, so a seeded request samples the
same tokens whatever else is running. The requests layer clamps tiny temperatures to
MIN_TEMPERATURE (as vLLM does); the sampler itself still falls back to greedy whenever the
reshaped distribution is not a finite, positive one, so no parameter can yield NaN
probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_TEMPERATURE = 0.01  # below this (and above 0) a request samples at this temperature


@dataclass(frozen=True)
class SamplingParams:
    """What a request asks of the sampler and of the stop conditions."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    logprobs: int | None = None  # number of top alternatives; None: no logprobs


def sample(row: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """Pick a token id from one row of log-probabilities."""
    greedy = int(np.argmax(row))
    if not params.temperature > 0.0:  # 0, or NaN should one ever get here
        return greedy
    with np.errstate(all="ignore"):
        scaled = row.astype(np.float64) / params.temperature
        probs = np.exp(scaled - scaled.max())
        total = probs.sum()
        if not (np.isfinite(total) and total > 0.0) or not np.isfinite(probs).all():
            return greedy
        probs /= total
        if params.top_p < 1.0:
            order = np.argsort(-probs, kind="stable")
            cumulative = np.cumsum(probs[order])
            keep = order[: int(np.searchsorted(cumulative, params.top_p)) + 1]
            mask = np.zeros_like(probs)
            mask[keep] = probs[keep]
            probs = mask / mask.sum()
    return int(rng.choice(len(probs), p=probs))


def top_logprobs(row: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k most likely tokens with their log-probabilities, ties by lower id."""
    order = np.argsort(-row, kind="stable")[:k]
    return [(int(i), float(row[i])) for i in order]
