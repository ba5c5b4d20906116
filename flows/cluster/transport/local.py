"""The `local` transport: nodes that are this machine, driven with plain subprocesses.

Used by the local cluster (ranks as processes on one host) and by tests. Commands never go
through a shell: argv is handed to the kernel as a list, so nothing in it is interpreted.
A command runs in a session of its own (a terminal's Ctrl-C reaches only us), so when we are
interrupted while waiting for it (Ctrl-C, or SIGTERM turned into one) its whole process group is
stopped before the interrupt goes on: no pytest, pip or model preparation is left running.
A result keeps only the end of a command's output (`OUTPUT_KEPT` per stream, in bounds.py), and at
a timeout any process still holding the output pipes (a daemon that left the session) is killed.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from flows.cluster.transport.base import (
    DEFAULT_TIMEOUT_S,
    CommandResult,
    check_env,
    ps_state_alive,
)
from flows.cluster.transport.bounds import OutputTail
from flows.errors import TransportError

INTERRUPT_GRACE_S = 2.0


def _stop_group(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM the child's process group, SIGKILL what is left after a grace; reap the child."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, sig)
        try:
            child.communicate(timeout=INTERRUPT_GRACE_S)
            if sig == signal.SIGTERM:  # the leader is gone; the rest of its group goes too
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
            return
        except subprocess.TimeoutExpired:
            continue


def _read_tails(child: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes]:
    """The last `OUTPUT_KEPT` bytes of the child's stdout and stderr (a line saying how much was
    cut first), read until both close and the child exits; TimeoutExpired past `timeout`."""
    deadline = time.monotonic() + timeout
    streams = [stream for stream in (child.stdout, child.stderr) if stream is not None]
    tails = {stream.fileno(): OutputTail() for stream in streams}
    with selectors.DefaultSelector() as selector:
        for stream in streams:
            selector.register(stream.fileno(), selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(child.args, timeout)
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    tails[key.fd].add(chunk)
                else:
                    selector.unregister(key.fd)
    for stream in streams:
        stream.close()
    child.wait(timeout=max(deadline - time.monotonic(), 0.001))
    kept = [tail.value() for tail in tails.values()]
    return (kept[0], kept[1]) if len(kept) == 2 else (b"", b"")


def _drain_or_kill_holders(child: subprocess.Popen[bytes]) -> None:
    """Reap a killed child; a process that left its session (a daemon) but still holds its
    output pipes would keep `communicate` waiting past any timeout, so it is killed too."""
    try:
        child.communicate(timeout=INTERRUPT_GRACE_S)
    except subprocess.TimeoutExpired:
        for pid in _pipe_holders(child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.communicate(timeout=INTERRUPT_GRACE_S)
    child.wait()


def _pipe_holders(child: subprocess.Popen[bytes]) -> set[int]:
    """Other processes holding the child's stdout or stderr pipe open (from /proc)."""
    pipes = {
        f"pipe:[{os.fstat(stream.fileno()).st_ino}]"
        for stream in (child.stdout, child.stderr)
        if stream is not None and not stream.closed
    }
    holders = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            if any(str(fd.readlink()) in pipes for fd in fd_dir.iterdir()):
                holders.add(int(fd_dir.parent.name))
    holders.discard(os.getpid())
    return holders


class LocalTransport:
    """Run commands and move files on this machine, under the name of a cluster node."""

    def __init__(
        self, node: str = "local", *, command_timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.node = node
        self.command_timeout_s = command_timeout_s
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        check: bool = False,
    ) -> CommandResult:
        """Run argv as a subprocess; on timeout its process group is killed."""
        began = time.monotonic()
        timeout = self.command_timeout_s if timeout is None else timeout
        try:
            child = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**os.environ, **check_env(env)},
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as error:
            raise TransportError(f"{self.node}: cannot run {argv[0]!r}: {error}") from error
        try:
            out, err = _read_tails(child, timeout)
        except subprocess.TimeoutExpired as expired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            _drain_or_kill_holders(child)
            raise TransportError(
                f"{self.node}: `{argv[0]}` timed out after {timeout:g} s"
            ) from expired
        except BaseException:
            _stop_group(child)
            raise
        result = CommandResult(
            node=self.node,
            argv=tuple(argv),
            rc=child.returncode,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            duration=time.monotonic() - began,
        )
        return result.check() if check else result

    def start(
        self,
        argv: Sequence[str],
        *,
        stdout_path: str,
        stderr_path: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> int:
        """Start argv detached in a new session with output appended to files; return its pid."""
        try:
            with Path(stdout_path).open("ab") as out:
                err_file = Path(stderr_path).open("ab") if stderr_path else None  # noqa: SIM115
                try:
                    child = subprocess.Popen(
                        list(argv),
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err_file or subprocess.STDOUT,
                        env={**os.environ, **check_env(env)},
                        cwd=cwd,
                        start_new_session=True,
                    )
                finally:
                    if err_file is not None:
                        err_file.close()
        except OSError as error:
            raise TransportError(f"{self.node}: cannot start {argv[0]!r}: {error}") from error
        with self._lock:
            self._children[child.pid] = child
        return child.pid

    def is_alive(self, pid: int) -> bool:
        """Reap our own children first, so a finished one never looks alive as a zombie."""
        with self._lock:
            child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        probe = self.run(["ps", "-o", "stat=", "-p", str(pid)], timeout=10)
        return probe.ok and ps_state_alive(probe.stdout)

    def kill(self, pid: int, sig: int = signal.SIGTERM, *, group: bool = True) -> None:
        """Signal the process or its group; a process already gone is fine."""
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)

    def put(self, local: Path, remote: str) -> None:
        """Copy a file (the node is this machine)."""
        self._copy(local, Path(remote))

    def get(self, remote: str, local: Path) -> None:
        """Copy a file (the node is this machine)."""
        self._copy(Path(remote), local)

    def read_text(self, remote: str) -> str:
        """Read a text file."""
        try:
            return Path(remote).read_text()
        except OSError as error:
            raise TransportError(f"{self.node}: cannot read {remote}: {error}") from error

    def write_text(self, remote: str, text: str) -> None:
        """Write a text file."""
        try:
            Path(remote).write_text(text)
        except OSError as error:
            raise TransportError(f"{self.node}: cannot write {remote}: {error}") from error

    def close(self) -> None:
        """Nothing to release locally."""

    def _copy(self, source: Path, target: Path) -> None:
        try:
            shutil.copyfile(source, target)
        except OSError as error:
            raise TransportError(
                f"{self.node}: cannot copy {source} to {target}: {error}"
            ) from error
