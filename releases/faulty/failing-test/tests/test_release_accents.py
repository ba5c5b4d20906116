"""The release's promise: accented Latin text is served as written (it is not: see below).

Added by releases/faulty/failing-test.yaml. The engine's tokenizer is character-level over
printable ASCII and maps anything else to <unk>, so this round trip fails: the release-tests gate
must catch a release whose test contradicts its code, while every cluster gate passes.
"""

from __future__ import annotations

from sparkengine import tokenizer


def test_accented_latin_text_round_trips() -> None:
    text = "café, naïve, São Paulo"
    ids = tokenizer.encode(text, add_bos=False)
    assert tokenizer.UNK not in ids
    assert tokenizer.decode(ids) == text
