"""A scripted coding-agent session: the traffic `sparkgate bench record` was made to capture.

Real agents keep one growing conversation: a long system prompt with tool descriptions, then
turn after turn the model's reply and a tool result (a file read, a test run) appended, so every
request repeats the whole history and most of it should come from the prefix cache. This sends
that shape to an OpenAI-compatible endpoint (streamed chat completions, temperature 0, with a
bearer key so recordings show it redacted), seeded so the same seed sends the same tool results.
It made config/sessions/agent-example.jsonl through the recording proxy against the bundled
engine:

    python -m flows.research.agent_session http://127.0.0.1:8001 --turns 22
"""

from __future__ import annotations

import argparse
import json
import random
import urllib.request
from collections.abc import Sequence

from flows.engine_api.sse import SseDecoder

SYSTEM = (
    "You are a coding agent working in a Python repository. Use the tools to read files and "
    "run tests, then answer briefly.\n"
    "Tools:\n"
    "- read_file(path): the text of a file\n"
    "- run_tests(selection): pytest's summary for the selection\n"
    "- edit_file(path, old, new): replace text in a file\n"
    "Rules: read before you edit; run the tests after every edit; keep changes small.\n"
)
DEMO_KEY = "sk-demo-agent-0123456789abcdef"
"""Sent as the bearer token, so a recording shows it redacted (the bundled engine needs none)."""


def tool_result(rng: random.Random, turn: int) -> str:
    """A seeded tool output: a slice of made-up source or a test summary (about 150 chars)."""
    if turn % 3 == 2:
        passed, failed = rng.randint(5, 40), rng.randint(0, 2)
        return f"run_tests: {passed} passed, {failed} failed in {rng.uniform(0.5, 9):.2f}s\n"
    name = rng.choice(["parse", "step", "merge", "flush", "score"])
    lines = [f"# flows/{name}_{turn}.py"]
    for i in range(3):
        lines.append(f"def {name}_{i}(x, y={rng.randint(1, 99)}):")
        lines.append(f"    return x * {rng.randint(2, 9)} + y - {i}")
    return "read_file:\n" + "\n".join(lines) + "\n"


def served_model(url: str) -> str:
    """The first model the endpoint serves (GET /v1/models)."""
    with urllib.request.urlopen(url.rstrip("/") + "/v1/models", timeout=30) as response:  # noqa: S310
        return str(json.loads(response.read())["data"][0]["id"])


def complete(url: str, model: str, messages: Sequence[dict[str, str]], max_tokens: int) -> str:
    """One streamed chat completion; the reply's text."""
    body = {
        "model": model,
        "messages": list(messages),
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(  # noqa: S310 - the caller's own endpoint
        url.rstrip("/") + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {DEMO_KEY}"},
    )
    with urllib.request.urlopen(request, timeout=600) as response:  # noqa: S310
        raw = response.read()
    decoder, text = SseDecoder(), []
    for events in [*decoder.feed(raw), *decoder.finish()]:
        for event in events or []:
            for choice in event.get("choices") or []:
                text.append((choice.get("delta") or {}).get("content") or "")
    return "".join(text)


def run(url: str, turns: int, *, seed: int = 0, max_tokens: int = 32) -> int:
    """Send `turns` requests of one growing conversation; the last prompt's length in chars."""
    model = served_model(url)
    rng = random.Random(seed)  # noqa: S311 - seeded made-up file contents, not a secret
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "The step tests fail after the last merge. Fix it."},
    ]
    for turn in range(turns):
        reply = complete(url, model, messages, max_tokens)
        messages.append({"role": "assistant", "content": reply})
        messages.append({"role": "user", "content": tool_result(rng, turn)})
    return sum(len(m["content"]) for m in messages)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run the session."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("url", help="base URL (the recording proxy, or the engine itself)")
    parser.add_argument("--turns", type=int, default=22, help="requests to send")
    parser.add_argument("--seed", type=int, default=0, help="seed of the tool results")
    parser.add_argument("--max-tokens", type=int, default=32, help="reply tokens per turn")
    args = parser.parse_args(argv)
    chars = run(args.url, args.turns, seed=args.seed, max_tokens=args.max_tokens)
    print(f"{args.turns} turns sent; the conversation is {chars} characters")  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
