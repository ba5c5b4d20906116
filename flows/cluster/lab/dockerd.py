"""Private Docker daemons under the project-local state dir, one per (lab) host.

This machine runs no Docker daemon and may not have one at all, and lab hosts each need their
own, so sparkgate starts `dockerd` itself: its data root, exec root, pidfile, log and API socket
all live under `.sparkgate/docker/<name>/`, with no bridge and no iptables (containers use host
networking). With `netns`, the daemon runs inside a lab host's network namespace through
`nsenter --net`; its API stays a unix socket on the shared filesystem, so the pipeline reaches
every lab daemon from the host. Stopping removes exactly what starting made: the process, its
managed containerd, and the mounts it left under its roots.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import docker
from docker.errors import DockerException
from pydantic import BaseModel, ConfigDict
from requests.exceptions import RequestException

from flows.errors import ClusterError

UNIX_SOCKET_MAX = 107  # sun_path is 108 bytes including the terminating NUL
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 20.0
LOG_TAIL_LINES = 30


class DockerDaemon(BaseModel):
    """A running private daemon: what a caller needs to use it, record it and stop it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    root: Path
    socket: Path
    pid: int
    data_root: Path
    exec_root: Path
    log_file: Path
    storage_driver: str
    netns: str | None = None

    @property
    def base_url(self) -> str:
        """The docker SDK address of this daemon."""
        return f"unix://{self.socket}"


def daemon_root(name: str, state_dir: Path) -> Path:
    """Where a daemon called `name` keeps everything: `<state_dir>/docker/<name>`."""
    if not name or "/" in name or name.startswith("."):
        raise ClusterError(f"invalid docker daemon name {name!r} (expected a plain folder name)")
    return state_dir.resolve() / "docker" / name


def dockerd_argv(root: Path, storage_driver: str, netns: str | None = None) -> list[str]:
    """The daemon command line: private roots and socket, no bridge, no iptables."""
    argv = [
        "dockerd",
        "--bridge=none",
        "--iptables=false",
        "--ip6tables=false",
        f"--storage-driver={storage_driver}",
        f"--data-root={root / 'data'}",
        f"--exec-root={root / 'x'}",
        f"--pidfile={root / 'dockerd.pid'}",
        f"--config-file={root / 'daemon.json'}",
        f"--host=unix://{root / 'api.sock'}",
    ]
    # `nsenter --net` joins only the host's network namespace; `ip netns exec` would also
    # remount /sys, hiding the cgroup mounts dockerd needs ("Devices cgroup isn't mounted").
    return ["nsenter", f"--net=/run/netns/{netns}", *argv] if netns else argv


def start_dockerd(
    name: str, state_dir: Path, netns: str | None = None, timeout: float = START_TIMEOUT_S
) -> DockerDaemon:
    """Start a private dockerd and wait until its API answers; ClusterError with the log tail."""
    root = daemon_root(name, state_dir)
    socket = root / "api.sock"
    if len(str(socket)) > UNIX_SOCKET_MAX:
        raise ClusterError(
            f"docker socket path {socket} is {len(str(socket))} bytes, over the unix limit of "
            f"{UNIX_SOCKET_MAX}: use a shorter project path or daemon name"
        )
    if shutil.which("dockerd") is None:
        raise ClusterError("dockerd is not installed (apt-get install docker.io)")
    if os.geteuid() != 0:
        raise ClusterError("starting a private dockerd needs root")
    if socket.exists() and _api_answers(f"unix://{socket}"):
        raise ClusterError(f"a docker daemon already serves {socket}; stop it first")
    root.mkdir(parents=True, exist_ok=True)
    # Our own (empty) config: settings in the host's /etc/docker/daemon.json must not leak in.
    (root / "daemon.json").write_text("{}\n")
    socket.unlink(missing_ok=True)
    storage_driver = "overlay2" if overlay_supported(state_dir.resolve()) else "vfs"
    log_file = root / "dockerd.log"
    with log_file.open("ab") as log:
        process = subprocess.Popen(
            dockerd_argv(root, storage_driver, netns),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    handle = DockerDaemon(
        name=name,
        root=root,
        socket=socket,
        pid=process.pid,
        data_root=root / "data",
        exec_root=root / "x",
        log_file=log_file,
        storage_driver=storage_driver,
        netns=netns,
    )
    _wait_for_api(handle, process, timeout)
    return handle


def stop_dockerd(handle: DockerDaemon, grace: float = STOP_GRACE_S) -> None:
    """Stop the daemon (TERM, wait, KILL), its containerd, and unmount and remove its exec root."""
    containerd_pid = _read_pid(handle.exec_root / "containerd" / "containerd.pid")
    if _is_our_daemon(handle):
        _terminate(handle.pid, grace)
    if containerd_pid is not None and _alive(containerd_pid):
        _terminate(containerd_pid, grace)
    _unmount_under(handle.exec_root)
    _unmount_under(handle.data_root)
    shutil.rmtree(handle.exec_root, ignore_errors=True)
    handle.socket.unlink(missing_ok=True)


def remove_daemon_state(handle: DockerDaemon) -> None:
    """Delete a stopped daemon's whole folder (images included): for throw-away test daemons."""
    if _alive(handle.pid):
        raise ClusterError(f"docker daemon {handle.name} (pid {handle.pid}) is still running")
    _unmount_under(handle.root)
    shutil.rmtree(handle.root, ignore_errors=True)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a daemon log, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


@cache
def overlay_supported(directory: Path) -> bool:
    """Whether an overlay mount works on the filesystem holding `directory` (else use vfs)."""
    probe = directory / ".overlay-probe"
    parts = {part: probe / part for part in ("lower", "upper", "work", "merged")}
    try:
        for path in parts.values():
            path.mkdir(parents=True, exist_ok=True)
        options = f"lowerdir={parts['lower']},upperdir={parts['upper']},workdir={parts['work']}"
        mounted = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(parts["merged"])],
            capture_output=True,
            check=False,
        )
        if mounted.returncode != 0:
            return False
        subprocess.run(["umount", str(parts["merged"])], capture_output=True, check=False)
        return True
    except OSError:
        return False
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def _wait_for_api(handle: DockerDaemon, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Poll the API until it answers; on exit or timeout stop what started and explain why."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stop_dockerd(handle)
            raise ClusterError(
                f"dockerd {handle.name} exited with status {process.returncode} before its API "
                f"answered; log {handle.log_file}:\n{log_tail(handle.log_file)}"
            )
        if handle.socket.exists() and _api_answers(handle.base_url):
            return
        time.sleep(0.2)
    stop_dockerd(handle)
    process.wait(timeout=5)
    raise ClusterError(
        f"dockerd {handle.name} did not answer on {handle.socket} within {timeout:.0f} s; "
        f"log {handle.log_file}:\n{log_tail(handle.log_file)}"
    )


def _api_answers(base_url: str) -> bool:
    try:
        client = docker.APIClient(base_url=base_url, timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (DockerException, RequestException, OSError):
        return False


def _is_our_daemon(handle: DockerDaemon) -> bool:
    """True when handle.pid is still the dockerd serving handle.socket (not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{handle.pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(handle.socket).encode() in cmdline and _alive(handle.pid)


def _terminate(pid: int, grace: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Whether pid runs; reaps it first when it is our exited child (a zombie is not alive)."""
    with contextlib.suppress(ChildProcessError):
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _mounts_under(root: Path) -> Iterator[Path]:
    """Mount points at or below root, deepest first (nested mounts go before their parents)."""
    top = str(root.resolve())
    points: list[str] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point == top or point.startswith(top + "/"):
                points.append(point)
    for point in sorted(points, key=len, reverse=True):
        yield Path(point)


def _unmount_under(root: Path) -> None:
    for point in _mounts_under(root):
        subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)
