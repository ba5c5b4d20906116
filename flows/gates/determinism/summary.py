"""The determinism gate's summary: scenarios against the reference, the previous, the hashes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from flows.gates.outputs import Difference

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class FirstDifference(BaseModel):
    """Where a scenario first departs from the reference (the record's short form)."""

    model_config = _FROZEN

    prompt: str
    index: int


class ScenarioRow(BaseModel):
    """One scenario's responses against the served-alone reference."""

    model_config = _FROZEN

    name: str
    identical: int = 0
    differing: int = 0
    first_difference: FirstDifference | None = None
    differences: list[Difference] = []


class PromptHashes(BaseModel):
    """The SHA-256 of one prompt's token ids and of its logprob bytes."""

    model_config = _FROZEN

    tokens: str
    logprobs: str


class ChatHashes(PromptHashes):
    """A chat probe's hashes: its tokens and logprobs, and its canonical response."""

    content: str = Field(description="SHA-256 of the canonical response (content, tool calls).")


class PreviousReport(BaseModel):
    """This release's outputs against the previous release's record."""

    model_config = _FROZEN

    mode: Literal["unchanged", "changed", "none"]
    identical: int = 0
    total: int = 0
    top_token_agreement: float | None = None
    reason: str
    differing: list[str] = Field(default=[], description="Prompt ids whose hashes differ.")
    chat_identical: int = Field(default=0, description="Chat probes hashing as the previous's.")
    chat_total: int = Field(
        default=0, description="Chat probes compared (those the previous record has)."
    )

    @property
    def passed(self) -> bool:
        """Only a release that declares unchanged outputs can fail here."""
        return self.mode != "unchanged" or not self.differing


class DeterminismSummary(BaseModel):
    """What the record renders of the determinism gate (and `verify` judges again)."""

    model_config = _FROZEN

    gate: Literal["determinism"] = "determinism"
    prompts: int | None = None
    max_tokens: int | None = None
    scenarios: list[ScenarioRow] = []
    against_previous: PreviousReport | None = None
    hashes: dict[str, PromptHashes] = {}
    staggered_overlap: int | None = None
    staggered_requests: int | None = None
    cached_tokens: list[int | None] = []
    sampled_streams: int | None = None
    chat_probes: int = Field(default=0, description="Chat probes sent in every scenario.")
    chat_hashes: dict[str, ChatHashes] = {}

    def hash_table(self) -> dict[str, dict[str, str]]:
        """The hashes as plain mappings (what the next release compares against)."""
        return {prompt: digest.model_dump() for prompt, digest in self.hashes.items()}
