"""A stage's headline and self-checks, as its gate's story tells them (the registry says which).

The README, the index, `sparkgate records` and `verify` read the gates' typed summaries through
this module and the gates' stories (`flows.gates.story`), so a number is formatted and a verdict
is recomputed in exactly one place: the gate's own package. Nothing here touches files.
"""

from __future__ import annotations

from pydantic import BaseModel

from flows.gates.registry import BY_NAME
from flows.gates.story import GateStory


def story_of(stage: str) -> GateStory | None:
    """The story of the gate a stage is named after (None for other stages, e.g. calibration)."""
    gate = BY_NAME.get(stage)
    return gate.story if gate is not None else None


def headline(stage: str, summary: BaseModel | None) -> str:
    """The headline of a stage for tables (empty for stages without one)."""
    story = story_of(stage)
    return story.headline(summary) if story is not None and summary is not None else ""


def summary_problems(stage: str, summary: BaseModel | None, outcome: str) -> list[str]:
    """Everything in a stage's summary that contradicts itself or its outcome."""
    story = story_of(stage)
    return story.problems(summary, outcome) if story is not None and summary is not None else []
