"""The prompts the output gates send: named, a seeded long prompt, and two chat probes.

Prompt ids (`p0`, `p1`, ..., `long`, `chat_tool`, `chat_json`) key the stored hashes, so a
release's hashes can be compared with its predecessor's record as long as both sent the same
prompts; the text travels alongside for people and for that check. The long prompt is a seeded
"field log" (the recipe's shape), the same text for the same length on every machine, so it
needs no file.

The chat probes are what the recipe's users depend on besides plain completions: one
/v1/chat/completions request offering tools (`tool_choice` "auto", so a vLLM serving the recipe
answers through its tool-call parser) and one asking for a JSON-schema response format. Their
tools and schema are fixed here, so every release sends the same probes.
"""

from __future__ import annotations

import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

LONG_SEED = 1210
LONG_ID = "long"
CHAT_TOOL_ID = "chat_tool"
CHAT_JSON_ID = "chat_json"
PromptKind = Literal["completion", "tool_call", "json_schema"]
CHAT_TOOL_TEXT = "What is the weather in Oslo today, in celsius? Use the tool."
CHAT_JSON_TEXT = "Describe the city of Oslo as a JSON object."
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name."},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Current local time in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
]
"""The tools the tool-call probe offers (OpenAI's `tools` shape)."""
CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "country": {"type": "string"},
        "population": {"type": "integer", "minimum": 0},
        "coastal": {"type": "boolean"},
        "districts": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "country", "population", "coastal", "districts"],
}
"""The schema of the JSON-schema probe's `response_format`."""
_WORDS = (
    "pump", "valve", "sensor", "reading", "north", "south", "pressure", "nominal", "checked",
    "crew", "shift", "logged", "flow", "tank", "level", "steady", "alarm", "cleared", "spare",
)  # fmt: skip


class Prompt(BaseModel):
    """One prompt as sent: a stable id, its text and how many tokens to generate."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(
        description="p0, p1, ... in settings order; `long` for the long prompt; "
        "`chat_tool`, `chat_json` for the chat probes."
    )
    text: str = Field(description="The prompt, or the chat probe's user message.")
    max_tokens: int = Field(ge=1)
    kind: PromptKind = Field(
        default="completion",
        description="completion (/v1/completions), or a chat probe: tool_call, json_schema.",
    )

    @property
    def chat(self) -> bool:
        """Whether it goes to /v1/chat/completions."""
        return self.kind != "completion"


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


def chat_probes(max_tokens: int) -> list[Prompt]:
    """The tool-call probe and the JSON-schema probe, in that order."""
    return [
        Prompt(id=CHAT_TOOL_ID, text=CHAT_TOOL_TEXT, max_tokens=max_tokens, kind="tool_call"),
        Prompt(id=CHAT_JSON_ID, text=CHAT_JSON_TEXT, max_tokens=max_tokens, kind="json_schema"),
    ]


CHAT_IDS = frozenset({CHAT_TOOL_ID, CHAT_JSON_ID})
"""Prompt ids of the chat probes (their stored responses are chat completions)."""


def chat_body(prompt: Prompt, model: str, top_logprobs: int) -> dict[str, Any]:
    """The greedy /v1/chat/completions body of a chat probe (logprobs and token ids asked)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt.text}],
        "max_tokens": prompt.max_tokens,
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": top_logprobs,
        "return_token_ids": True,
    }
    if prompt.kind == "tool_call":
        body.update(tools=TOOLS, tool_choice="auto")
    elif prompt.kind == "json_schema":
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "city", "schema": CITY_SCHEMA},
        }
    return body
