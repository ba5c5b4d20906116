"""Character-level tokenizer and the chat template.

Ids: 0 <bos>, 1 <eos>, 2 <unk>, 3 tab, 4 newline, 5..99 printable ASCII 32..126. Anything else
becomes <unk>, so the token count of a text is always 1 (BOS) + its length in characters.

Chat template (documented in engine/README.md):
    <bos> then for each message "<|{role}|>\\n{content}\\n", then "<|assistant|>\\n".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

BOS = 0
EOS = 1
UNK = 2
VOCAB_SIZE = 100
_SPECIAL = {BOS: "<bos>", EOS: "<eos>", UNK: "\ufffd"}
_FIRST_PRINTABLE = 5


def _char_id(ch: str) -> int:
    code = ord(ch)
    if ch == "\t":
        return 3
    if ch == "\n":
        return 4
    if 32 <= code <= 126:
        return _FIRST_PRINTABLE + code - 32
    return UNK


def encode(text: str, *, add_bos: bool = True) -> list[int]:
    """Text to ids; one id per character, BOS first unless told otherwise."""
    ids = [_char_id(ch) for ch in text]
    return [BOS, *ids] if add_bos else ids


def token_text(token_id: int) -> str:
    """The text of one token (special tokens render as their names, <unk> as U+FFFD)."""
    if token_id in _SPECIAL:
        return _SPECIAL[token_id]
    if token_id == 3:
        return "\t"
    if token_id == 4:
        return "\n"
    if _FIRST_PRINTABLE <= token_id < VOCAB_SIZE:
        return chr(token_id - _FIRST_PRINTABLE + 32)
    raise ValueError(f"token id {token_id} outside the vocabulary")


def decode(ids: Iterable[int]) -> str:
    """Ids to text, dropping BOS/EOS (what a client sees as the generated text)."""
    return "".join(token_text(i) for i in ids if i not in (BOS, EOS))


def apply_chat_template(messages: Sequence[tuple[str, str]]) -> list[int]:
    """(role, content) pairs to prompt ids, ending with the assistant header."""
    text = "".join(f"<|{role}|>\n{content}\n" for role, content in messages)
    return encode(text + "<|assistant|>\n")
