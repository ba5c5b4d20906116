"""Tokenizer: exact counts, round trips, the documented chat template."""

from __future__ import annotations

import string

from sparkengine import tokenizer


def test_every_printable_character_round_trips_with_one_token_each() -> None:
    text = string.printable.replace("\r", "").replace("\x0b", "").replace("\x0c", "")
    ids = tokenizer.encode(text)
    assert ids[0] == tokenizer.BOS
    assert len(ids) == len(text) + 1
    assert tokenizer.decode(ids) == text
    assert max(ids) < tokenizer.VOCAB_SIZE
    assert len(set(ids[1:])) == len(set(text))


def test_unknown_characters_become_unk_and_keep_the_count() -> None:
    ids = tokenizer.encode("é€", add_bos=False)
    assert ids == [tokenizer.UNK, tokenizer.UNK]
    assert tokenizer.decode(ids) == "\ufffd\ufffd"


def test_eos_and_bos_are_not_part_of_decoded_text() -> None:
    assert tokenizer.decode([tokenizer.BOS, *tokenizer.encode("ab", add_bos=False), 1]) == "ab"


def test_chat_template_is_the_documented_text() -> None:
    ids = tokenizer.apply_chat_template([("system", "be brief"), ("user", "hi")])
    expected = "<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n"
    assert ids == tokenizer.encode(expected)
