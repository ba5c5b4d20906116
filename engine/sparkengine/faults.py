"""Fault switches read from the environment; each one makes exactly one pipeline gate fail.

SPARKENGINE_FAULT_BATCH_VARIANT=1          matmul sums depend on batch size (determinism gate)
SPARKENGINE_FAULT_SLOWDOWN=0.05            each step does 5 % more real work (benchmark gate)
SPARKENGINE_FAULT_LAZY_KERNEL=<family>     family skipped by preparation, compiles on first use
SPARKENGINE_FAULT_CRASH=<rank>@<phase>     that rank exits non-zero on entering the phase
SPARKENGINE_FAULT_STALL=<rank>@<phase>     that rank stops advancing on entering the phase
SPARKENGINE_FAULT_PREPARE_DELAY=<rank>:<s> that rank's preparation takes s seconds longer
SPARKENGINE_FAULT_REQUEST_SEED=<seed>      a request with this seed fails while sampling
                                           (only that request: the engine serves on)
Phases: load, prepare, rendezvous, warmup, serve.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from sparkengine import events
from sparkengine.errors import EngineError
from sparkengine.kernels.families import FAMILIES

PHASES = ("load", "prepare", "rendezvous", "warmup", "serve")
_PREFIX = "SPARKENGINE_FAULT_"


def _rank_at(name: str, value: str) -> tuple[int, str]:
    rank, sep, phase = value.partition("@")
    if not sep or not rank.isdigit() or phase not in PHASES:
        raise EngineError(f"{_PREFIX}{name}={value!r}: expected <rank>@<phase>, phase in {PHASES}")
    return int(rank), phase


@dataclass(frozen=True)
class Faults:
    """The fault switches in force for this process."""

    batch_variant: bool = False
    slowdown: float = 0.0
    lazy_family: str | None = None
    crash: tuple[int, str] | None = None
    stall: tuple[int, str] | None = None
    prepare_delay: tuple[int, float] | None = None
    request_seed: int | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Faults:
        """Parse the switches; a malformed value is an EngineError naming the variable."""
        env = os.environ if env is None else env

        def get(name: str) -> str:
            return env.get(_PREFIX + name, "").strip()

        lazy = get("LAZY_KERNEL") or None
        if lazy is not None and lazy not in FAMILIES:
            raise EngineError(f"{_PREFIX}LAZY_KERNEL={lazy!r}: expected one of {sorted(FAMILIES)}")
        delay = None
        if raw := get("PREPARE_DELAY"):
            rank, _, seconds = raw.partition(":")
            try:
                delay = (int(rank), float(seconds))
            except ValueError:
                raise EngineError(f"{_PREFIX}PREPARE_DELAY={raw!r}: expected <rank>:<s>") from None
        seed = get("REQUEST_SEED")
        if seed and not seed.isdigit():
            raise EngineError(f"{_PREFIX}REQUEST_SEED={seed!r}: expected a seed (an integer)")
        try:
            slowdown = float(get("SLOWDOWN") or 0.0)
        except ValueError:
            raise EngineError(f"{_PREFIX}SLOWDOWN={get('SLOWDOWN')!r}: expected a number") from None
        return cls(
            batch_variant=get("BATCH_VARIANT") not in ("", "0"),
            slowdown=slowdown,
            lazy_family=lazy,
            crash=_rank_at("CRASH", get("CRASH")) if get("CRASH") else None,
            stall=_rank_at("STALL", get("STALL")) if get("STALL") else None,
            prepare_delay=delay,
            request_seed=int(seed) if seed else None,
        )

    def enter(self, rank: int, phase: str) -> None:
        """Apply a crash or stall aimed at this rank and phase (no-op otherwise)."""
        if self.crash == (rank, phase):
            events.emit("fatal", error="InjectedCrash", message=f"fault: crash in {phase}")
            os._exit(70)
        if self.stall == (rank, phase):
            events.emit("stalled", phase=phase)
            threading.Event().wait()  # never returns: alive, heartbeating, not advancing

    def prepare_delay_for(self, rank: int) -> float:
        """Extra seconds this rank spends preparing."""
        if self.prepare_delay and self.prepare_delay[0] == rank:
            return self.prepare_delay[1]
        return 0.0


def spin(seconds: float) -> None:
    """Sleep in small slices (used to spread an injected delay over preparation steps)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.1))
