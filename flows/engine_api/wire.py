"""The OpenAI-compatible wire format the engine speaks, as far as sparkgate reads it.

Models accept extra fields (servers add their own) and validate only what is used: served
models, tokenize answers, and completion bodies and stream chunks (choices with text, token
ids and logprobs, and usage with cached prompt tokens).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

_OPEN = ConfigDict(extra="allow", frozen=True)


class ModelCard(BaseModel):
    """One served model (GET /v1/models)."""

    model_config = _OPEN

    id: str
    max_model_len: int | None = None


class ModelList(BaseModel):
    """The served models."""

    model_config = _OPEN

    data: list[ModelCard] = []


class TokenizeResponse(BaseModel):
    """Token ids by the server's own tokenizer (POST /tokenize)."""

    model_config = _OPEN

    tokens: list[int]


class Logprobs(BaseModel):
    """Per-token log-probabilities of a completion choice."""

    model_config = _OPEN

    token_logprobs: list[float | None] = []
    top_logprobs: list[dict[str, float] | None] = []


class Choice(BaseModel):
    """One choice of a completion body or stream chunk."""

    model_config = _OPEN

    index: int = 0
    text: str = ""
    token_ids: list[int] | None = None
    logprobs: Logprobs | None = None
    finish_reason: str | None = None


class PromptTokensDetails(BaseModel):
    """How much of the prompt the server found in its prefix cache."""

    model_config = _OPEN

    cached_tokens: int | None = None


class Usage(BaseModel):
    """Token counts of a completion."""

    model_config = _OPEN

    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class Completion(BaseModel):
    """A completion body, or one chunk of a streamed completion."""

    model_config = _OPEN

    id: str = ""
    choices: list[Choice] = Field(default=[])
    usage: Usage | None = None
