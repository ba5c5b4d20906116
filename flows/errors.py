"""One exception hierarchy for the whole pipeline.

Every error a user can cause or meet derives from `SparkgateError`, so the CLI can turn each one
into a clean message and an exit code instead of a traceback. Spec errors (bad input) exit 2 and
are raised before anything is started; everything else exits 1.
"""

from __future__ import annotations

from pathlib import Path


class SparkgateError(Exception):
    """Base of every error sparkgate raises on purpose."""

    exit_code = 1


class SpecError(SparkgateError):
    """A declarative file is invalid: names the file, the line and the key path.

    Rendered as `FILE:LINE: key.path: what is wrong (expected ...)`.
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: Path | str | None = None,
        line: int | None = None,
        key: str = "",
        expected: str | None = None,
    ) -> None:
        self.message = message
        self.file = str(file) if file is not None else None
        self.line = line
        self.key = key
        self.expected = expected
        super().__init__(self.render())

    def render(self) -> str:
        where = self.file or "<input>"
        if self.line is not None:
            where = f"{where}:{self.line}"
        text = f"{where}: {self.key or '(top level)'}: {self.message}"
        if self.expected:
            text += f" (expected {self.expected})"
        return text


class MultipleSpecError(SpecError):
    """Several independent problems found in one pass over a file; each is a `SpecError`."""

    def __init__(self, errors: list[SpecError]) -> None:
        self.errors = errors
        first = errors[0]
        super().__init__(
            first.message, file=first.file, line=first.line, key=first.key, expected=first.expected
        )

    def render(self) -> str:
        return (
            "\n".join(error.render() for error in getattr(self, "errors", [])) or super().render()
        )


class InvalidSpecFilesError(SpecError):
    """Several files were checked and some are invalid; each was already reported on its own."""

    def __init__(self, failed: int, total: int) -> None:
        self.failed = failed
        self.total = total
        super().__init__(f"{failed} of {total} spec files are invalid")

    def render(self) -> str:
        return self.message


class ClusterError(SparkgateError):
    """Something went wrong driving the nodes of a cluster."""


class TransportError(ClusterError):
    """A node could not be reached, or a command on it could not be run."""


class HostKeyError(TransportError):
    """A node's SSH host key is unknown or has changed; we never accept it silently."""


class LockHeldError(ClusterError):
    """The cluster is locked by another qualification."""


class LockLostError(ClusterError):
    """This run's cluster lock was taken over (judged stale) by another run: stop driving it."""


class BuildError(ClusterError):
    """Building or distributing a release failed."""


class BootError(ClusterError):
    """A boot failed: names the node, the rank and the cause, and where the evidence is."""

    def __init__(self, message: str, *, evidence: Path | None = None) -> None:
        super().__init__(message)
        self.evidence = evidence


def boot_failure_reason(prefix: str, message: str) -> str:
    """A caller's words for a failed boot before the boot's own, said once: a BootError already
    begins "boot failed: ", and "boot failed: boot failed: node ..." reads as a stutter."""
    return message if message.startswith(f"{prefix}: ") else f"{prefix}: {message}"


class BenchError(SparkgateError):
    """A benchmark could not be run or compared."""


class GateFailedError(SparkgateError):
    """A qualification gate ran and its verdict is a failure."""


class GateError(SparkgateError):
    """A gate could not do its work (a request failed, the engine answered nonsense)."""


class GitRangeError(GateError):
    """`git diff` could not list a classification's patch range (a spec problem at load time,
    a gate error if the clone changed since)."""


class InconclusiveError(GateFailedError):
    """A gate ran but its noise allowed no decision; never a pass (exit 3, distinct from 1)."""

    exit_code = 3


class RecordError(SparkgateError):
    """An experiments record is missing, malformed or does not verify."""


class MachineError(SparkgateError):
    """The machine sparkgate runs on failed a write or read (disk full, I/O error, read-only).

    Says nothing about the release: it is reported as the machine's failure, never as a gate's or
    a promotion's verdict, so the fix (free space, repair the disk) is not mistaken for a
    release problem.
    """


class DiskFullError(MachineError):
    """A file could not be written for lack of space or quota; says if its old version is intact."""


class PromotionError(SparkgateError):
    """A release may not be promoted (a gate missing or failed), or its deploy failed."""


class MissingPreviousError(SparkgateError):
    """The release compares with a previous release that has no record on this cluster shape.

    Raised before anything starts (exit 2, like bad input): the fix is to qualify the previous
    release on a cluster of that shape first, not to retry.
    """

    exit_code = 2
