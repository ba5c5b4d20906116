"""The prompts the output gates send: named, and a seeded long prompt of a chosen length.

Prompt ids (`p0`, `p1`, ..., `long`) key the stored hashes, so a release's hashes can be compared
with its predecessor's record as long as both sent the same prompts; the text travels alongside
for people and for that check. The long prompt is a seeded "field log" (the recipe's shape), the
same text for the same length on every machine, so it needs no file.
"""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict, Field

LONG_SEED = 1210
LONG_ID = "long"
_WORDS = (
    "pump", "valve", "sensor", "reading", "north", "south", "pressure", "nominal", "checked",
    "crew", "shift", "logged", "flow", "tank", "level", "steady", "alarm", "cleared", "spare",
)  # fmt: skip


class Prompt(BaseModel):
    """One prompt as sent: a stable id, its text and how many tokens to generate."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="p0, p1, ... in settings order; `long` for the long prompt.")
    text: str
    max_tokens: int = Field(ge=1)


def named_prompts(texts: list[str], max_tokens: int) -> list[Prompt]:
    """The settings' prompts with their ids, in order."""
    return [Prompt(id=f"p{i}", text=text, max_tokens=max_tokens) for i, text in enumerate(texts)]


def long_text(chars: int, seed: int = LONG_SEED) -> str:
    """A seeded field log of exactly `chars` characters (about a token per character here)."""
    rng = random.Random(seed)  # noqa: S311 - reproducible text, not security
    lines: list[str] = []
    size = 0
    entry = 0
    while size < chars:
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 9)))
        line = f"{entry:04d} {words}.\n"
        lines.append(line)
        size += len(line)
        entry += 1
    return "".join(lines)[:chars]


def long_prompt(chars: int, max_tokens: int) -> Prompt:
    """The long prefill mixed in beside the short prompts."""
    return Prompt(id=LONG_ID, text=long_text(chars), max_tokens=max_tokens)
