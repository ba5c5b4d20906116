"""The qualification's rules about its stages: cache keys and the overall verdict (pure).

Kept apart from Prefect so the rules can be read and tested on their own: what makes a finished
gate reusable on a re-run (its cache key covers the build digest, the resolved cluster, the
gate's settings and the record it belongs to), and how the gates' results become one verdict.
Which stages exist, in which order, is in `flows.stages`, shared with the terminal board.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from flows.gates.base import GateResult, Outcome
from flows.gates.registry import GATES

QUALIFIED = "qualified"
INCONCLUSIVE = "inconclusive"
__all__ = ["GATES", "INCONCLUSIVE", "QUALIFIED", "digest_of", "gate_cache_key", "verdict"]


def digest_of(value: BaseModel | Mapping[str, Any] | str | None) -> str:
    """A stable sha256 of a model, mapping or string (keys sorted)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def gate_cache_key(
    gate: str,
    *,
    build_digest: str,
    cluster: BaseModel,
    settings: BaseModel,
    record: str,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """The key under which a finished gate is reused: same build, cluster, settings, record."""
    parts = {
        "gate": gate,
        "build": build_digest,
        "cluster": digest_of(cluster),
        "settings": digest_of(settings),
        "record": record,
        "extra": dict(extra or {}),
    }
    return f"{gate}-{digest_of(parts)[:32]}"


def verdict(results: Mapping[str, GateResult]) -> tuple[str, str | None]:
    """`qualified`, `failed at <gate>: <reason>` naming the first failed gate in order, or,
    when no gate failed but one could not decide, that gate's `inconclusive ...` reason (not
    failed: a person decides; the second value, the failed gate, is then None)."""
    for gate in GATES:
        result = results.get(gate)
        if result is not None and result.outcome == Outcome.FAILED:
            return f"failed at {gate}: {result.reason}", gate
    missing = [gate for gate in GATES if gate not in results]
    if missing:
        return f"incomplete: {', '.join(missing)} not run", missing[0]
    for gate in GATES:
        result = results[gate]
        if result.outcome == Outcome.INCONCLUSIVE:
            said = result.reason
            return (
                said if said.startswith(INCONCLUSIVE) else f"inconclusive at {gate}: {said}"
            ), None
    return QUALIFIED, None
