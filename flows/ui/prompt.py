"""The decision prompt fitted to a terminal: every command copy-pasteable at any width.

A live view wraps text at the terminal's width, so at 80 columns a long command (one that starts
with `PREFECT_API_URL=...`, or names a release by its path) broke mid-word, and a pasted half
ran as a command of its own. Here a command line that does not fit is broken between words
with a shell continuation (` \\`), after its environment assignments first, so the
`sparkgate ...` part stays whole on its own line when it fits, and the lines pasted together run
as the one command. Quoted words are never split. Prose lines are left to wrap. Pure: no
console here.
"""

from __future__ import annotations

import re

FIRST = "  "
"""How the prompt indents a command (`flows.promotion.paused.decision_prompt`)."""
NEXT = "    "
"""How a continued command's later lines are indented."""
CONTINUES = " \\"
_WORD = re.compile(r"""(?:'[^']*'|"[^"]*"|\S)+""")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def fit_prompt(prompt: str, width: int) -> str:
    """`prompt` with each command line that is wider than `width` continued over several."""
    return "\n".join(part for line in prompt.splitlines() for part in fit_command(line, width))


def fit_command(line: str, width: int) -> list[str]:
    """One prompt line as the lines to show: itself when it fits or is not a command, else the
    command continued with ` \\` (a word wider than the terminal still gets a line of its own)."""
    if len(line) <= width or not _is_command(line):
        return [line]
    words = _WORD.findall(line)
    env = 0
    while env < len(words) and _ASSIGNMENT.match(words[env]):
        env += 1
    groups = [" ".join(words[:env])] if 0 < env < len(words) else []
    rest = words[env:] if groups else words
    current = ""
    for index, word in enumerate(rest):
        trial = f"{current} {word}" if current else word
        indent = NEXT if groups else FIRST
        room = width - (len(CONTINUES) if index < len(rest) - 1 else 0)
        if current and len(indent) + len(trial) > room:
            groups.append(current)
            current = word
        else:
            current = trial
    groups.append(current)
    last = len(groups) - 1
    return [
        (FIRST if at == 0 else NEXT) + group + (CONTINUES if at < last else "")
        for at, group in enumerate(groups)
    ]


def _is_command(line: str) -> bool:
    """A line the prompt shows as a command: indented by two, running `sparkgate`."""
    return line.startswith(FIRST) and not line.startswith(FIRST + " ") and "sparkgate " in line
