"""What every transport offers, and the one way a command line is turned into shell text.

The pipeline drives nodes through this small interface so the same code runs a rank as a local
subprocess or on a GB10 host over SSH. Remote shells only ever see text produced by
`shell_command`, which quotes every argument: a node name or path such as `x; rm -rf /` from a
YAML file reaches the program as one literal argument and never runs as shell. A command line is
public on its node (`ps`, /proc/PID/cmdline), so a transport that talks to a remote shell sends
env values on the session's stdin (`env_over_stdin`), never in the command text.
"""

from __future__ import annotations

import re
import shlex
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from flows.errors import TransportError

DEFAULT_TIMEOUT_S = 60.0
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class CommandResult(BaseModel):
    """The outcome of one finished command on one node."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str
    duration: float

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0."""
        return self.rc == 0

    def check(self) -> CommandResult:
        """Return self, or raise a TransportError naming node, command and stderr on failure."""
        if self.rc != 0:
            tail = (self.stderr or self.stdout).strip()[-400:]
            raise TransportError(
                f"{self.node}: `{shlex.join(self.argv)}` exited {self.rc}: {tail or '(no output)'}"
            )
        return self


@runtime_checkable
class Transport(Protocol):
    """Run commands, start background processes and move files on one node."""

    node: str

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        check: bool = False,
    ) -> CommandResult:
        """Run argv to completion (timeout None: the transport's default); TransportError on
        timeout or when the node is unreachable."""
        ...

    def start(
        self,
        argv: Sequence[str],
        *,
        stdout_path: str,
        stderr_path: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> int:
        """Start argv in the background in its own process group; return its pid (= pgid)."""
        ...

    def is_alive(self, pid: int) -> bool:
        """True while the process exists and is not a zombie."""
        ...

    def kill(self, pid: int, sig: int = signal.SIGTERM, *, group: bool = True) -> None:
        """Send sig to the process (or its whole group); a process already gone is not an error."""
        ...

    def put(self, local: Path, remote: str) -> None:
        """Copy a local file to the node."""
        ...

    def get(self, remote: str, local: Path) -> None:
        """Copy a file from the node to this machine."""
        ...

    def read_text(self, remote: str) -> str:
        """Read a text file on the node."""
        ...

    def write_text(self, remote: str, text: str) -> None:
        """Write a text file on the node (not atomic; use a temp file and `mv` for that)."""
        ...

    def close(self) -> None:
        """Release connections; the transport reconnects on next use."""
        ...


def check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """Validate environment names so they can never smuggle shell syntax."""
    checked = dict(env or {})
    for name in checked:
        if not _ENV_NAME.fullmatch(name):
            raise TransportError(f"invalid environment variable name {name!r}")
    return checked


def _words(argv: Sequence[str], env: Mapping[str, str] | None) -> list[str]:
    if not argv:
        raise TransportError("empty command")
    variables = check_env(env)
    if not variables:
        return list(argv)
    return ["env", "--", *(f"{k}={v}" for k, v in variables.items()), *argv]


ENV_FROM_STDIN = 'eval "$(cat)" || exit 1\n'
"""Shell text that exports the variables `env_over_stdin` sends (read to EOF, then run)."""


def env_over_stdin(env: Mapping[str, str] | None) -> tuple[str, bytes]:
    """(shell text to put first, bytes to send on stdin) that give the command `env`.

    The values never stand in the command text: stdin carries `export NAME='value'` lines
    (names checked, values quoted), which the remote shell reads to EOF and evaluates before
    the command runs, so they reach its environment and no command line. No env: nothing.
    """
    variables = check_env(env)
    if not variables:
        return "", b""
    lines = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in variables.items())
    return ENV_FROM_STDIN, lines.encode()


def _cd(cwd: str | None) -> str:
    return "" if cwd is None else f"cd -- {shlex.quote(cwd)} || exit 1\n"


def shell_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> str:
    """Quote argv (plus env and cwd) into POSIX shell text that runs exactly that argv."""
    return _cd(cwd) + "exec " + shlex.join(_words(argv, env))


_PIPE_OF = "$(readlink /proc/$$/fd/{fd} | sed 's/[][?*\\\\]/\\\\&/g')"
"""Shell text: what the shell's own fd points to (`pipe:[INODE]`), as a `find -lname` pattern."""
_KILL_WRITERS = """\
  for __sg_fd in $(find /proc -mindepth 3 -maxdepth 3 -path '/proc/[0-9]*/fd/*' \\
      \\( -lname "$__sg_out" -o -lname "$__sg_err" \\) 2>/dev/null); do
    __sg_pid=${__sg_fd#/proc/}; __sg_pid=${__sg_pid%%/*}
    case $(sed -n 's/^flags:[[:space:]]*//p' "/proc/$__sg_pid/fdinfo/${__sg_fd##*/}") in
      *[15]) kill -s KILL "$__sg_pid";;
    esac
  done
"""
"""Shell text: SIGKILL each process holding the write end of the shell's output (flags ending in
1: O_WRONLY); the read end is the SSH server's, the same pipe, and is left alone."""


def guarded_command(
    argv: Sequence[str],
    *,
    limit_s: float,
    kill_after_s: float,
    cwd: str | None = None,
) -> str:
    """Shell text that runs argv under coreutils `timeout`, then, if that timed out, kills every
    process still holding the shell's output (a daemon the command left in a session of its
    own, which `timeout` does not reach); exits with the command's status.

    It runs on the node by itself, so the bound holds even when the caller has gone. The shell
    lets go of its own output first, so only the command's leftovers hold it then.
    """
    guard = ["timeout", "-k", f"{kill_after_s:g}", f"{limit_s:g}"]
    return (
        f"{_cd(cwd)}__sg_out={_PIPE_OF.format(fd=1)} __sg_err={_PIPE_OF.format(fd=2)}\n"
        f"{shlex.join([*guard, *_words(argv, None)])}\n"
        "__sg_rc=$?\n"
        'if [ "$__sg_rc" = 124 ] || [ "$__sg_rc" = 137 ]; then\n'
        f"  exec >/dev/null 2>&1\n{_KILL_WRITERS}"
        "fi\n"
        'exit "$__sg_rc"'
    )


def background_command(
    argv: Sequence[str],
    *,
    stdout_path: str,
    stderr_path: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> str:
    """Shell text that starts argv detached in a new session and prints its pid.

    `setsid` in a non-interactive shell does not fork (the background job is not a group
    leader), so `$!` is the pid of the new session and process group.
    """
    err = "2>&1" if stderr_path is None else f"2>> {shlex.quote(stderr_path)}"
    line = shlex.join(["setsid", *_words(argv, env)])
    return f"{_cd(cwd)}{line} < /dev/null >> {shlex.quote(stdout_path)} {err} &\necho $!"


def parse_pid(node: str, stdout: str) -> int:
    """The pid printed by `background_command`, or a TransportError."""
    text = stdout.strip().splitlines()
    if not text or not text[-1].isdigit():
        raise TransportError(f"{node}: could not start process (no pid in {stdout!r})")
    return int(text[-1])


def ps_state_alive(ps_output: str) -> bool:
    """Interpret `ps -o stat= -p PID`: alive when listed and not a zombie (Z) or dead (X)."""
    state = ps_output.strip()
    return bool(state) and state[0] not in "ZX"
