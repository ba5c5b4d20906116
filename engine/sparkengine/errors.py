"""Named engine errors: each failure the pipeline must recognise has its own class and message.

The pipeline reads these names from `fatal` events, so they are part of the contract.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every failure the engine reports by name."""


class ModelError(EngineError):
    """The model directory is missing, corrupt or does not match its manifest."""


class UnpreparedKernelError(EngineError):
    """A kernel configuration was requested after freeze without having been prepared."""

    def __init__(self, family: str, key: str) -> None:
        super().__init__(f"kernel {family}[{key}] was not prepared before freeze")
        self.family = family
        self.key = key


class CollectiveTimeoutError(EngineError):
    """A collective heard nothing from a peer for its timeout."""

    def __init__(self, peer: int, seq: int, phase: str, timeout_s: float) -> None:
        super().__init__(
            f"collective #{seq} in phase {phase}: nothing from rank {peer} for {timeout_s:g} s"
        )
        self.peer = peer
        self.seq = seq
        self.phase = phase
        self.timeout_s = timeout_s


class PeerFailureError(EngineError):
    """A peer rank died or stopped advancing."""

    def __init__(self, peer: int, reason: str) -> None:
        super().__init__(f"rank {peer} failed: {reason}")
        self.peer = peer
        self.reason = reason


class RequestError(EngineError):
    """A client request is invalid; becomes an OpenAI-shaped 400."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


class RequestFailedError(EngineError):
    """One request failed inside the engine; only that request ends (500 or a stream error)."""

    def __init__(self, error: str) -> None:
        super().__init__(f"the request failed inside the engine ({error})")
        self.error = error
