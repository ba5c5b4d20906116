"""`runc` for the recipe double's lab daemons: the recipe's unlimited memlock, within this machine.

The recipe runs every rank with `--ulimit=memlock=-1:-1` (R3/R4 `docker_run_args`, kept by the
example clusters, which the lab overlay may not change). The Sparks grant it: their daemon runs
as a root whose limits allow it. This sandbox's root has no CAP_SYS_RESOURCE and a hard memlock
limit of 8 MiB, so runc's container init cannot raise it and every rank stops with "error setting
rlimit type 8: operation not permitted". This wrapper, first on the lab daemons' PATH (moby 20.10
names its runtime `runc`, which containerd's runc shim finds on the PATH it inherits from
dockerd), lowers a memlock ask above the machine's hard limit to that limit in the bundle's
config.json, records each lowering as one JSON line, and execs the real runc. The container's
options (`docker inspect`) still carry the recipe's value; only what runc asks the kernel for
changes. Every other command and container passes through untouched.

Stdlib only: the stub `double.write_runc_wrapper` writes runs it with `python -S` for every runc
call. Pure: `starting`, `lowered`, `log_line`; I/O: `lower_in_bundle`, `main`.
"""

from __future__ import annotations

import copy
import json
import os
import resource
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

LOG_NAME = "memlock.jsonl"
MEMLOCK = "RLIMIT_MEMLOCK"
STARTS = frozenset({"create", "run"})
# runc's options that take a value (runc 1.1 main.go, create.go, run.go), so it is never read as
# the command or the container's ID.
GLOBAL_VALUES = frozenset({"--root", "--log", "--log-format", "--criu", "--rootless"})
START_VALUES = frozenset({"--bundle", "-b", "--console-socket", "--pid-file", "--preserve-fds"})


@dataclass(frozen=True)
class Start:
    """A container being started: its bundle folder (as given, relative to runc's cwd) and ID."""

    bundle: str
    container: str


@dataclass(frozen=True)
class Lowering:
    """A memlock ask lowered: (soft, hard) asked and given, in the bundle's units (bytes)."""

    asked: tuple[int, int]
    given: tuple[int, int]


def _options(argv: Sequence[str], valued: frozenset[str]) -> tuple[dict[str, str], list[int]]:
    """One level of runc's argv: the options given a value, and where the positional words are."""
    values: dict[str, str] = {}
    positional: list[int] = []
    index = 0
    while index < len(argv):
        word = argv[index]
        name, equals, value = word.partition("=")
        if name in valued and equals:
            values[name] = value
        elif word in valued and index + 1 < len(argv):
            values[word] = argv[index + 1]
            index += 1
        elif not word.startswith("-"):
            positional.append(index)
        index += 1
    return values, positional


def starting(argv: Sequence[str]) -> Start | None:
    """The start a `runc [global options] create|run [options] ID` asks for; None for any other
    command (argv without the program name; pure)."""
    _, words = _options(argv, GLOBAL_VALUES)
    if not words or argv[words[0]] not in STARTS:
        return None
    rest = argv[words[0] + 1 :]
    values, positional = _options(rest, START_VALUES)
    bundle = values.get("--bundle", values.get("-b", "."))
    return Start(bundle=bundle, container=rest[positional[-1]] if positional else "")


def lowered(
    config: Mapping[str, Any], allowed: int | None
) -> tuple[dict[str, Any], Lowering | None]:
    """The bundle's config with its memlock ask at most `allowed` (the machine's hard limit in
    bytes; None: unlimited), and the lowering; the config as it was and None when nothing asks
    above the limit. The caller's document is not changed (pure)."""
    changed = copy.deepcopy(dict(config))
    if allowed is None:
        return changed, None
    for rlimit in changed.get("process", {}).get("rlimits", []):
        if rlimit.get("type") != MEMLOCK:
            continue
        asked = (int(rlimit["soft"]), int(rlimit["hard"]))
        given = (min(asked[0], allowed), min(asked[1], allowed))
        if given == asked:
            return changed, None
        rlimit["soft"], rlimit["hard"] = given
        return changed, Lowering(asked=asked, given=given)
    return changed, None


def log_line(container: str, lowering: Lowering) -> str:
    """One JSON line recording a lowering (pure)."""
    soft, hard = lowering.asked
    given_soft, given_hard = lowering.given
    record = {
        "container": container,
        "asked": {"soft": soft, "hard": hard},
        "given": {"soft": given_soft, "hard": given_hard},
    }
    return json.dumps(record) + "\n"


def main(argv: Sequence[str], real: str, log: str) -> NoReturn:
    """Lower the memlock ask of a container being started, then exec the real runc as asked."""
    start = starting(argv[1:])
    if start is not None:
        lower_in_bundle(start, Path(log))
    os.execv(real, [real, *argv[1:]])


def lower_in_bundle(start: Start, log: Path) -> Lowering | None:
    """Lower the start's memlock ask in its bundle's config.json to this process's hard limit (what
    runc inherits) and append the lowering to `log`; None where nothing was lowered."""
    config_file = Path(start.bundle) / "config.json"
    config = json.loads(config_file.read_text())
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    allowed = None if hard == resource.RLIM_INFINITY else hard
    changed, lowering = lowered(config, allowed)
    if lowering is not None:
        config_file.write_text(json.dumps(changed))
        with log.open("a") as records:
            records.write(log_line(start.container, lowering))
    return lowering
