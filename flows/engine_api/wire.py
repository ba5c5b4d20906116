"""The OpenAI-compatible wire format the engine speaks, as far as sparkgate reads it.

Models accept extra fields (servers add their own) and validate only what is used: served
models, tokenize answers, and completion bodies and stream chunks (choices with text, token
ids and logprobs, and usage with cached prompt tokens), and non-streamed chat completions
(message content, tool calls, reasoning, per-token logprobs).
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


class FunctionCall(BaseModel):
    """The function a tool call names, with its arguments as the JSON text sent."""

    model_config = _OPEN

    name: str = ""
    arguments: str = ""


class ToolCall(BaseModel):
    """One tool call of a chat message (its `id` is per response, so never compared)."""

    model_config = _OPEN

    id: str | None = None
    type: str = "function"
    function: FunctionCall = FunctionCall()


class ChatMessage(BaseModel):
    """The assistant message of a chat choice: text, tool calls, and reasoning where served.

    vLLM's reasoning parser puts the reasoning in `reasoning_content` (newer versions also in
    `reasoning`).
    """

    model_config = _OPEN

    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class ChatTopLogprob(BaseModel):
    """One alternative for a chat token."""

    model_config = _OPEN

    token: str
    logprob: float | None = None


class ChatTokenLogprob(BaseModel):
    """A chosen chat token's logprob and its alternatives."""

    model_config = _OPEN

    token: str
    logprob: float | None = None
    top_logprobs: list[ChatTopLogprob] = []


class ChatLogprobs(BaseModel):
    """Per-token log-probabilities of a chat choice."""

    model_config = _OPEN

    content: list[ChatTokenLogprob] | None = None


class ChatChoice(BaseModel):
    """One choice of a non-streamed chat completion."""

    model_config = _OPEN

    index: int = 0
    message: ChatMessage = ChatMessage()
    token_ids: list[int] | None = None
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletion(BaseModel):
    """A non-streamed /v1/chat/completions body."""

    model_config = _OPEN

    id: str = ""
    choices: list[ChatChoice] = Field(default=[])
    usage: Usage | None = None
