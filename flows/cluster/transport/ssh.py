"""The `ssh` transport: GB10 hosts (or lab namespaces) driven over one paramiko connection each.

Host keys are verified against known_hosts and never accepted silently: an unknown or changed key
is a HostKeyError that says what to check, unless the cluster file explicitly sets
`accept_unknown_host_keys`: then the first key a host offers is pinned (appended to known_hosts)
and any later, different key for that host:port is refused as CHANGED, by this transport, by the
next connection and by every later run. `~/.ssh/config` is honoured (HostName, User, Port,
IdentityFile, UserKnownHostsFile), explicit cluster settings win over it. Every remote command
is shell text built from quoted argv (`guarded_command`), so nothing from a spec ever runs as
shell. Env values never stand in that text (it is the remote shell's command line, public on the
node): they go over the session's stdin (`env_over_stdin`), which the shell reads first. A
command is bounded as a local one is: on the node by `timeout`, then by killing whatever still
holds its output (a daemon it left), and in the driver by keeping only the end of its output.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import paramiko
from pydantic import BaseModel, ConfigDict, Field

from flows.cluster.transport.base import (
    DEFAULT_TIMEOUT_S,
    CommandResult,
    background_command,
    env_over_stdin,
    guarded_command,
    parse_pid,
    ps_state_alive,
)
from flows.cluster.transport.bounds import OutputTail
from flows.errors import HostKeyError, TransportError

log = logging.getLogger(__name__)
_T = TypeVar("_T")

DEFAULT_SSH_CONFIG = Path("~/.ssh/config")
REMOTE_SLACK_S = 1.0
REMOTE_KILL_AFTER_S = 2
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")


class SshSettings(BaseModel):
    """How to reach one node over SSH; None means "from ~/.ssh/config, else the default"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str
    port: int | None = Field(default=None, ge=1, le=65535)
    user: str | None = None
    key_file: Path | None = None
    known_hosts: Path | None = None
    ssh_config: Path | None = DEFAULT_SSH_CONFIG
    accept_unknown_host_keys: bool = False
    connect_timeout_s: float = Field(default=10.0, gt=0)
    connect_attempts: int = Field(default=3, ge=1)
    retry_backoff_s: float = Field(default=0.5, ge=0)
    keepalive_s: int = Field(default=5, ge=0)
    command_timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)


class SshTarget(BaseModel):
    """Where a connection actually goes once settings and ~/.ssh/config are combined."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hostname: str
    port: int
    user: str | None
    key_files: tuple[Path, ...]
    known_hosts: Path


def resolve_target(settings: SshSettings, config: paramiko.SSHConfig | None) -> SshTarget:
    """Combine explicit settings (first), the ssh config entry for the host, then defaults."""
    entry = config.lookup(settings.host) if config is not None else {}
    port = settings.port or int(entry.get("port", 22))
    user = settings.user or entry.get("user")
    if settings.key_file is not None:
        keys: tuple[Path, ...] = (settings.key_file.expanduser(),)
    else:
        keys = tuple(Path(item).expanduser() for item in entry.get("identityfile", []))
    known = settings.known_hosts
    if known is None:
        configured = str(entry.get("userknownhostsfile", "")).split()
        known = Path(configured[0]) if configured else DEFAULT_KNOWN_HOSTS
    return SshTarget(
        hostname=entry.get("hostname", settings.host),
        port=port,
        user=user,
        key_files=keys,
        known_hosts=known.expanduser(),
    )


def load_ssh_config(path: Path | None) -> paramiko.SSHConfig | None:
    """Parse an ssh config file; a missing file means no config."""
    if path is None or not path.expanduser().is_file():
        return None
    return paramiko.SSHConfig.from_path(str(path.expanduser()))


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style SHA256 fingerprint, as `ssh-keygen -l` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _RefuseUnknownHost(paramiko.MissingHostKeyPolicy):
    """Refuse a host whose key is not in known_hosts, with a message that says what to do."""

    def __init__(self, node: str, target: SshTarget) -> None:
        self.node = node
        self.target = target

    def missing_host_key(
        self,
        client: paramiko.SSHClient,  # noqa: ARG002 - paramiko's signature
        hostname: str,
        key: paramiko.PKey,
    ) -> None:
        raise HostKeyError(
            f"{self.node}: host key of {hostname} is unknown ({key.get_name()} "
            f"{fingerprint(key)}; not in {self.target.known_hosts}); verify it, then add it "
            f"(ssh-keyscan -p {self.target.port} {self.target.hostname} >> "
            f"{self.target.known_hosts}) or set accept_unknown_host_keys: true in the cluster file"
        )


class _PinUnknownHost(paramiko.MissingHostKeyPolicy):
    """Trust on first use: pin an unknown host's key in known_hosts, loudly (the cluster file
    asked for it); a key pinned meanwhile by another connection must be the same one."""

    def __init__(self, node: str, known_hosts: Path) -> None:
        self.node = node
        self.known_hosts = known_hosts

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        pin_host_key(self.known_hosts, hostname, key, node=self.node)
        client.get_host_keys().add(hostname, key.get_name(), key)


def pin_host_key(known_hosts: Path, hostname: str, key: paramiko.PKey, *, node: str) -> None:
    """Append `hostname key` to known_hosts unless it already names a key for that host.

    Under an exclusive flock of the file, so two connections racing to pin one host cannot
    both write; a different key already pinned is a HostKeyError, never a second entry.
    """
    known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    handle = os.open(known_hosts, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        pinned = paramiko.HostKeys(str(known_hosts)).lookup(hostname)
        if pinned:
            if any(item == key for item in pinned.values()):
                return
            old = next(iter(pinned.values()))
            raise HostKeyError(
                f"{node}: host key of {hostname} CHANGED: known_hosts ({known_hosts}) has "
                f"{fingerprint(old)}, the host offered {fingerprint(key)}; if the host was "
                "reinstalled, remove the old entry, otherwise treat this as an attack"
            )
        log.warning(
            "%s: accepting unknown host key of %s (%s %s) because accept_unknown_host_keys "
            "is set; pinned in %s",
            node, hostname, key.get_name(), fingerprint(key), known_hosts,
        )  # fmt: skip
        os.write(handle, f"{hostname} {key.get_name()} {key.get_base64()}\n".encode())
        os.fsync(handle)
    finally:
        os.close(handle)


def host_key_policy(node: str, target: SshTarget, *, pin: bool) -> paramiko.MissingHostKeyPolicy:
    """What to do with a host key known_hosts does not have: pin it, or refuse with advice."""
    if pin:
        return _PinUnknownHost(node, target.known_hosts)
    return _RefuseUnknownHost(node, target)


def host_key_changed(
    node: str, target: SshTarget, error: paramiko.BadHostKeyException
) -> HostKeyError:
    """The error for a host whose key differs from the one known_hosts has."""
    user = f"{target.user}@" if target.user else ""
    return HostKeyError(
        f"{node}: host key of {user}{target.hostname}:{target.port} CHANGED: known_hosts "
        f"({target.known_hosts}) has {fingerprint(error.expected_key)}, the host "
        f"offered {fingerprint(error.key)}; if the host was reinstalled, remove the old "
        f"entry (ssh-keygen -R {target.hostname}), otherwise treat this as an attack"
    )


class SshTransport:
    """One reused, thread-safe SSH connection (plus SFTP) to one node."""

    def __init__(self, node: str, settings: SshSettings) -> None:
        self.node = node
        self.settings = settings
        self.target = resolve_target(settings, load_ssh_config(settings.ssh_config))
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._connect_lock = threading.Lock()
        self._sftp_lock = threading.Lock()

    # -- connection -------------------------------------------------------------------------

    def _connection(self) -> paramiko.Transport:
        with self._connect_lock:
            client = self._client
            if client is not None:
                transport = client.get_transport()
                if transport is not None and transport.is_active():
                    return transport
                self._drop_locked()
            client = self._connect_with_retries()
            self._client = client
            transport = client.get_transport()
            if transport is None:  # pragma: no cover - connect() always sets one
                raise TransportError(f"{self.node}: connection has no transport")
            return transport

    def _connect_with_retries(self) -> paramiko.SSHClient:
        last: Exception | None = None
        for attempt in range(self.settings.connect_attempts):
            if attempt:
                time.sleep(self.settings.retry_backoff_s * 2 ** (attempt - 1))
            try:
                return self._connect_once()
            except (HostKeyError, TransportError):
                raise
            except (OSError, EOFError, paramiko.SSHException) as error:
                last = error
                log.info("%s: connect attempt %d failed: %s", self.node, attempt + 1, error)
        raise TransportError(
            f"{self.node}: cannot reach {self._where()} after "
            f"{self.settings.connect_attempts} attempts: {last}"
        )

    def _connect_once(self) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        if self.target.known_hosts.is_file():
            client.load_host_keys(str(self.target.known_hosts))
        client.set_missing_host_key_policy(
            host_key_policy(self.node, self.target, pin=self.settings.accept_unknown_host_keys)
        )
        timeout = self.settings.connect_timeout_s
        try:
            client.connect(
                self.target.hostname,
                port=self.target.port,
                username=self.target.user,
                key_filename=[str(path) for path in self.target.key_files] or None,  # type: ignore[arg-type]
                allow_agent=True,
                look_for_keys=not self.target.key_files,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
            )
        except paramiko.BadHostKeyException as error:
            client.close()
            raise host_key_changed(self.node, self.target, error) from error
        except paramiko.AuthenticationException as error:
            client.close()
            raise TransportError(
                f"{self.node}: authentication to {self._where()} failed: {error}"
            ) from error
        except BaseException:
            client.close()
            raise
        transport = client.get_transport()
        if transport is not None and self.settings.keepalive_s:
            transport.set_keepalive(self.settings.keepalive_s)
        return client

    def _where(self) -> str:
        user = f"{self.target.user}@" if self.target.user else ""
        return f"{user}{self.target.hostname}:{self.target.port}"

    def _drop_locked(self) -> None:
        with self._sftp_lock:
            if self._sftp is not None:
                with contextlib.suppress(Exception):
                    self._sftp.close()
                self._sftp = None
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None

    def close(self) -> None:
        """Close the connection; the next call reconnects."""
        with self._connect_lock:
            self._drop_locked()

    # -- commands ---------------------------------------------------------------------------

    def _exec(
        self, text: str, timeout: float, label: str, stdin: bytes = b""
    ) -> tuple[int, str, str, float]:
        began = time.monotonic()
        deadline = began + timeout
        transport = self._connection()
        try:
            channel = transport.open_session(timeout=max(deadline - time.monotonic(), 0.1))
        except (OSError, EOFError, paramiko.SSHException) as error:
            self.close()
            if time.monotonic() >= deadline:
                raise TransportError(
                    f"{self.node}: `{label}` timed out after {timeout:g} s "
                    f"(no answer from {self._where()})"
                ) from error
            raise TransportError(
                f"{self.node}: cannot open a session for `{label}`: {error}"
            ) from error
        out, err = OutputTail(), OutputTail()
        try:
            channel.exec_command(text)
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            pause = 0.001
            while True:
                moved = _drain(channel, out, err)
                if channel.exit_status_ready() and not moved:
                    _drain(channel, out, err)
                    break
                if time.monotonic() > deadline:  # the connection stays: others may use it
                    raise TransportError(
                        f"{self.node}: `{label}` timed out after {timeout:g} s (on {self._where()})"
                    )
                pause = 0.001 if moved else min(pause * 2, 0.02)
                time.sleep(pause)
            rc = channel.recv_exit_status()
        except (OSError, EOFError, paramiko.SSHException) as error:
            self.close()
            raise TransportError(
                f"{self.node}: connection lost during `{label}`: {error}"
            ) from error
        finally:
            channel.close()
        return rc, out.text(), err.text(), time.monotonic() - began

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        check: bool = False,
    ) -> CommandResult:
        """Run argv on the node (quoted, never shell-interpreted) and wait for it.

        The client gives up after the timeout; coreutils `timeout` on the node ends the command
        shortly after, and then every process still holding its output (a daemon it left), so
        nothing keeps running there once the caller was told it failed. The result keeps the
        end of each output stream (`OUTPUT_KEPT`).
        """
        limit = self.settings.command_timeout_s if timeout is None else timeout
        prelude, stdin = env_over_stdin(env)
        text = prelude + guarded_command(
            argv, limit_s=limit + REMOTE_SLACK_S, kill_after_s=REMOTE_KILL_AFTER_S, cwd=cwd
        )
        rc, out, err, duration = self._exec(text, limit, argv[0], stdin)
        result = CommandResult(
            node=self.node, argv=tuple(argv), rc=rc, stdout=out, stderr=err, duration=duration
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
        """Start argv detached (new session, own process group) with output to files."""
        prelude, stdin = env_over_stdin(env)
        text = prelude + background_command(
            argv, stdout_path=stdout_path, stderr_path=stderr_path, cwd=cwd
        )
        rc, out, err, _ = self._exec(text, self.settings.command_timeout_s, argv[0], stdin)
        if rc != 0:
            raise TransportError(f"{self.node}: cannot start {argv[0]!r}: {err.strip() or rc}")
        return parse_pid(self.node, out)

    def is_alive(self, pid: int) -> bool:
        """True while the process exists on the node and is not a zombie."""
        probe = self.run(["ps", "-o", "stat=", "-p", str(pid)], timeout=30)
        return probe.ok and ps_state_alive(probe.stdout)

    def kill(self, pid: int, sig: int = signal.SIGTERM, *, group: bool = True) -> None:
        """Signal the process (or its group) on the node; already gone is fine."""
        name = signal.Signals(sig).name.removeprefix("SIG")
        target = f"-{pid}" if group else str(pid)
        # LC_ALL=C: the stderr text below is matched, and a node's locale may translate it
        result = self.run(["kill", "-s", name, "--", target], timeout=30, env={"LC_ALL": "C"})
        if not result.ok and "no such process" not in result.stderr.lower():
            result.check()

    # -- files ------------------------------------------------------------------------------

    def _sftp_call(self, what: str, action: Callable[[paramiko.SFTPClient], _T]) -> _T:
        transport = self._connection()
        with self._sftp_lock:
            try:
                if self._sftp is None:
                    self._sftp = paramiko.SFTPClient.from_transport(transport)
                if self._sftp is None:  # pragma: no cover - paramiko returns None only on failure
                    raise TransportError(f"{self.node}: SFTP unavailable")
                return action(self._sftp)
            except (OSError, EOFError, paramiko.SSHException) as error:
                raise TransportError(f"{self.node}: {what}: {error}") from error

    def put(self, local: Path, remote: str) -> None:
        """Upload a file over SFTP."""
        self._sftp_call(f"cannot upload {local} to {remote}", lambda s: s.put(str(local), remote))

    def get(self, remote: str, local: Path) -> None:
        """Download a file over SFTP."""
        self._sftp_call(f"cannot download {remote}", lambda s: s.get(remote, str(local)))

    def read_text(self, remote: str) -> str:
        """Read a text file over SFTP."""

        def read(sftp: paramiko.SFTPClient) -> str:
            with sftp.open(remote, "rb") as handle:
                return bytes(handle.read()).decode(errors="replace")

        return self._sftp_call(f"cannot read {remote}", read)

    def write_text(self, remote: str, text: str) -> None:
        """Write a text file over SFTP."""

        def write(sftp: paramiko.SFTPClient) -> None:
            with sftp.open(remote, "wb") as handle:
                handle.write(text.encode())

        self._sftp_call(f"cannot write {remote}", write)


def _drain(channel: paramiko.Channel, out: OutputTail, err: OutputTail) -> bool:
    """Move whatever output is buffered; True when something moved."""
    moved = False
    while channel.recv_ready():
        out.add(channel.recv(65536))
        moved = True
    while channel.recv_stderr_ready():
        err.add(channel.recv_stderr(65536))
        moved = True
    return moved
