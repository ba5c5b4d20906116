"""Distinct prompts of exact token length, made from real source text.

Copies of one prompt measure how a batch-invariant engine routes identical text, not kernel
speed, and random tokens make speculative decoding meaningless. So every request gets its own
passage of Python's standard-library source (real text, present on every machine), chosen by a
seeded hash of its key so every arm sends the same passages, behind a per-run nonce so nothing
can hit a prefix cache from an earlier sample. Exact length comes from the engine's own
tokenizer (`/tokenize`); the token ids are sent as the prompt.
"""

from __future__ import annotations

import hashlib
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

MIN_FILE_BYTES = 4096
CORPUS_LIMIT = 16 * 1024 * 1024
Tokenize = Callable[[str], list[int]]


@cache
def corpus() -> str:
    """Standard-library `*.py` files over 4 KiB, in name order, joined (at most 16 MiB)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts: list[str] = []
    size = 0
    for path in sorted(root.glob("*.py")):
        if path.stat().st_size < MIN_FILE_BYTES:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        size += len(text)
        if size >= CORPUS_LIMIT:
            break
    return "\n".join(parts)


def passage(key: str, seed: int, chars: int) -> str:
    """`chars` characters of the corpus from a seeded offset (wrapping around)."""
    text = corpus()
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    start = int.from_bytes(digest[:8], "big") % len(text)
    out = text[start : start + chars]
    while len(out) < chars:
        out += "\n" + text[: chars - len(out) - 1]
    return out


@dataclass
class PromptFactory:
    """Makes the prompt of each request: nonce + key header + passage, cut to exact tokens."""

    tokenize: Tokenize
    seed: int
    nonce: str
    chars_per_token: float = 4.0
    _seen: set[str] = field(default_factory=set)

    def text(self, key: str, chars: int) -> str:
        """A distinct text for `key` (the same passage in every arm with the same seed)."""
        # the first characters differ per request, so not even one cache block is shared
        unique = hashlib.sha256(f"{self.nonce}:{key}".encode()).hexdigest()[:16]
        return f"[{unique} {key}]\n" + passage(key, self.seed, chars)

    def ids(self, key: str, tokens: int) -> list[int]:
        """Exactly `tokens` token ids of a distinct prompt for `key`.

        Raises:
            ValueError: if a key is used twice in one run (it would be a copy, not distinct).
        """
        if key in self._seen:
            raise ValueError(f"prompt key {key!r} used twice in one run")
        self._seen.add(key)
        chars = int(tokens * self.chars_per_token * 1.2) + 64
        while True:
            text = self.text(key, chars)
            ids = self.tokenize(text)
            if len(ids) >= tokens:
                self.chars_per_token = max(0.5, len(text) / max(len(ids), 1))
                return ids[:tokens]
            chars *= 2
