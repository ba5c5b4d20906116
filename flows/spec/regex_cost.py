"""Whether a regex can backtrack without end, judged from its parse before it ever runs.

Python's `re` backtracks: `^(a+)+$` on forty `a`s and a `b` tries about 2^40 ways to split them,
and a match cannot be interrupted in-process. A spec's regex (a command build's `image_line`) is
therefore refused at validate time when its shape allows an exponential number of ways to match
one text:

- a repeat (of more than one round) whose body holds an unbounded repeat that nothing divides
  from the next round: `(a+)+`, `(\\w+\\s?)+`, `(.*a){20}`; a repeat followed in its body by a
  character it cannot match (`(?:[a-z]+/)*`) splits every text one way only, and is allowed;
- a repeat over alternatives that can begin with the same character: `(a|ab)*`, `(\\d|[0-9a-f])+`.

Possessive repeats (`a++`) and atomic groups (`(?>...)`) never backtrack and are allowed. The
rule is deliberately cautious (a few patterns it refuses would run fast); what it lets through
that is merely polynomial is still bounded where the regex runs (a time limit, short lines).
Character sets are compared on the first 512 code points, with the pattern's own flags.
"""

from __future__ import annotations

import importlib
from typing import Any

_PARSER: Any = importlib.import_module("re._parser")
_COMPILER: Any = importlib.import_module("re._compiler")
_C: Any = importlib.import_module("re._constants")

_SAMPLE = tuple(chr(code) for code in range(512))
_ANY_CHAR = frozenset(_SAMPLE)
EMPTY = ""
"""Stands in a set of first characters for "may match nothing"."""
_EMPTY_ONLY = frozenset({EMPTY})
_SINGLE = {"LITERAL", "NOT_LITERAL", "ANY", "IN", "CATEGORY"}
_ZERO_WIDTH = {"AT", "ASSERT", "ASSERT_NOT"}
MANY_ROUNDS = 16
"""An inner repeat allowing more rounds than this counts as unbounded (`(a{1,100}){1,100}`)."""


def backtracking_risk(pattern: str) -> str | None:
    """Why `pattern` may backtrack exponentially (to show a user), or None when it cannot."""
    try:
        parsed = _PARSER.parse(pattern)
    except Exception:  # noqa: BLE001 - an invalid pattern is reported by whoever compiles it
        return None
    return _risk(parsed.state, list(parsed), outer=False)


def _risk(state: Any, items: list[Any], *, outer: bool) -> str | None:
    for index, (op, av) in enumerate(items):
        name = str(op)
        if name in {"MAX_REPEAT", "MIN_REPEAT"}:
            found = _repeat_risk(state, av, outer=outer, after=items[index + 1 :])
        elif name == "POSSESSIVE_REPEAT":
            found = _risk(state, list(av[2]), outer=False)
        elif name == "ATOMIC_GROUP":
            found = _risk(state, list(av), outer=False)
        elif name == "SUBPATTERN":
            found = _risk(state, list(av[3]) + items[index + 1 :], outer=outer)
        elif name == "BRANCH":
            found = _first_risk(_risk(state, list(branch), outer=outer) for branch in av[1])
        elif name in {"ASSERT", "ASSERT_NOT"}:
            found = _risk(state, list(av[1]), outer=False)
        elif name == "GROUPREF_EXISTS":
            found = _first_risk(_risk(state, list(part), outer=outer) for part in av[1:] if part)
        else:
            found = None
        if found:
            return found
    return None


def _first_risk(found: Any) -> str | None:
    return next((item for item in found if item), None)


def _repeat_risk(state: Any, av: Any, *, outer: bool, after: list[Any]) -> str | None:
    """A repeat inside a repeat of several rounds, not divided from what follows it; or a
    repeat over alternatives that share a first character."""
    _, most, body = av
    many = most == _C.MAXREPEAT or most > MANY_ROUNDS
    if outer and many and not _divided(state, list(body), after):
        return "a repeat inside a repeat can split the same text many ways"
    rounds = most > 1
    if rounds and _alternatives_overlap(state, list(body)):
        return "a repeat over alternatives that can begin with the same character"
    return _risk(state, list(body), outer=outer or rounds)


def _divided(state: Any, body: list[Any], after: list[Any]) -> bool:
    """True when each round of a repeat over `body` must end at a character `body` cannot match
    (the next item is required and begins with none of the characters `body` consumes)."""
    if not after or not all(str(op) in _SINGLE for op, _ in body):
        return False
    consumed = frozenset().union(*(_chars(state, item) for item in body))
    following = _first(state, after)
    return EMPTY not in following and not (following & consumed)


def _alternatives_overlap(state: Any, body: list[Any]) -> bool:
    """True when a group of alternatives in `body` has two that can begin alike (or both match
    nothing: the parser leaves `(a|a)` as `a(|)`)."""
    for op, av in _flattened(body):
        if str(op) != "BRANCH":
            continue
        seen: set[str] = set()
        for branch in av[1]:
            first = _first(state, list(branch))
            if first & seen:
                return True
            seen |= first
    return False


def _flattened(items: list[Any]) -> list[Any]:
    """Items with the contents of plain groups in place of the groups."""
    flat = []
    for op, av in items:
        if str(op) == "SUBPATTERN":
            flat.extend(_flattened(list(av[3])))
        else:
            flat.append((op, av))
    return flat


def _first(state: Any, items: list[Any]) -> frozenset[str]:
    """The characters a match of `items` can begin with, and EMPTY when it may match nothing."""
    found: frozenset[str] = frozenset()
    for op, av in items:
        name = str(op)
        if name in _SINGLE:
            return found | _chars(state, (op, av))
        if name in _ZERO_WIDTH:
            continue
        if name == "SUBPATTERN":
            inner = _first(state, list(av[3]))
        elif name == "ATOMIC_GROUP":
            inner = _first(state, list(av))
        elif name in {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}:
            inner = _first(state, list(av[2])) | (_EMPTY_ONLY if av[0] == 0 else frozenset())
        elif name == "BRANCH":
            inner = frozenset().union(*(_first(state, list(branch)) for branch in av[1]))
        else:  # a back-reference, a conditional: anything
            return found | _ANY_CHAR | _EMPTY_ONLY
        if EMPTY not in inner:
            return found | inner
        found |= inner - _EMPTY_ONLY
    return found | _EMPTY_ONLY


def _chars(state: Any, item: Any) -> frozenset[str]:
    """The sampled characters one single-character item matches (its flags included)."""
    try:
        compiled = _COMPILER.compile(_PARSER.SubPattern(state, [item]), state.flags)
    except Exception:  # noqa: BLE001 - an item we cannot compile alone may match anything
        return _ANY_CHAR
    return frozenset(char for char in _SAMPLE if compiled.match(char))
