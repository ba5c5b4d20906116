"""Lab hosts: network namespaces with an sshd each, so SSH clusters can be tested on one machine.

`lab_up` builds N namespace "hosts" on a bridge in a private test range (198.18.0.0/15 is
reserved for benchmarking and never routed), one sshd per host with generated ed25519 host keys
and one client key, and writes known_hosts plus a cluster file. Every object is recorded in a
state JSON the moment it exists, so `lab_down` removes exactly what was made (by recorded names
and pids) even after a crash half-way, and never touches anything else.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from flows.errors import ClusterError
from flows.fileio import PRIVATE_MODE, write_text

SSHD = Path("/usr/sbin/sshd")
STATE_FILE = "state.json"
REQUIRED_TOOLS = ("ip", "ssh-keygen")
_MAX_IFNAME = 15
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class LabPlan(BaseModel):
    """What a lab consists of: names and addresses, derived from a prefix and a subnet."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix: str = Field(default="sg-lab", pattern=r"^[a-z][a-z0-9-]{1,9}$")
    nodes: int = Field(default=3, ge=1, le=16)
    subnet: ipaddress.IPv4Network = ipaddress.IPv4Network("198.18.0.0/24")
    docker: bool = False
    session_path: tuple[str, ...] = Field(
        default=(),
        description="folders put first on PATH in every SSH session (a test double's commands)",
    )

    @property
    def bridge(self) -> str:
        """The bridge in the root namespace that links every host."""
        return f"{self.prefix}-br"

    def namespace(self, index: int) -> str:
        """Network namespace (and node name) of host `index`."""
        return f"{self.prefix}-{index}"

    def host_link(self, index: int) -> str:
        """Root-namespace end of host `index`'s veth pair (cut it to cut the host off)."""
        return f"{self.prefix}-h{index}"

    def peer_link(self, index: int) -> str:
        """Namespace end of the veth pair before it is renamed to eth0 inside the namespace."""
        return f"{self.prefix}-p{index}"

    def address(self, index: int) -> ipaddress.IPv4Address:
        """Address of host `index`."""
        return self.subnet.network_address + 10 + index

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        """Address of the bridge, i.e. of this machine as seen from the hosts."""
        return self.subnet.network_address + 1


class LabHost(BaseModel):
    """One namespace host as created."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    namespace: str
    address: str
    host_dir: str
    sshd_config: str
    sshd_pid: int | None = None
    dockerd: dict[str, object] | None = Field(
        default=None, description="the DockerDaemon handle of this host's dockerd (--docker)"
    )


class LabState(BaseModel):
    """Exactly what `lab_up` created, written after every step; `lab_down` undoes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix: str
    subnet: str
    lab_dir: str
    docker: bool = False
    bridge: str | None = None
    links: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    hosts: tuple[LabHost, ...] = ()
    client_key: str | None = None
    known_hosts: str | None = None
    cluster_file: str | None = None

    def with_host(self, host: LabHost) -> LabState:
        """A copy with `host` added or replaced (by name)."""
        names = [item.name for item in self.hosts]
        if host.name not in names:
            return self.model_copy(update={"hosts": (*self.hosts, host)})
        index = names.index(host.name)
        hosts = (*self.hosts[:index], host, *self.hosts[index + 1 :])
        return self.model_copy(update={"hosts": hosts})


# -- pure renderings ----------------------------------------------------------------------------


def sshd_config_text(
    address: str,
    host_dir: Path,
    authorized_keys: Path,
    session_env: Mapping[str, str] | None = None,
) -> str:
    """An sshd config for one lab host: key auth only, root by key, own pid file and keys.

    `session_env` is set in every session (sshd's SetEnv), e.g. DOCKER_HOST naming the host's
    own dockerd, so a `docker` command run over SSH reaches that host's daemon as on a real node.
    """
    pairs = [f"{key}={value}" for key, value in (session_env or {}).items()]
    setenv = ["SetEnv " + " ".join(pairs)] if pairs else []  # sshd reads only the first SetEnv
    return "\n".join(
        [
            *setenv,
            "Port 22",
            f"ListenAddress {address}",
            f"HostKey {host_dir / 'ssh_host_ed25519_key'}",
            f"PidFile {host_dir / 'sshd.pid'}",
            f"AuthorizedKeysFile {authorized_keys}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "MaxStartups 64:30:128",
            "Subsystem sftp internal-sftp",
            "",
        ]
    )


def known_hosts_text(entries: Sequence[tuple[str, str]]) -> str:
    """known_hosts lines from (address, public key file text) pairs, comments dropped."""
    lines = []
    for address, public_key in entries:
        kind, blob = public_key.split()[:2]
        lines.append(f"{address} {kind} {blob}")
    return "\n".join(lines) + "\n"


def cluster_yaml_text(
    state: LabState, *, engine_file: Path, python: str, docker_sockets: Sequence[str] = ()
) -> str:
    """The lab as a cluster file: ssh as root with the lab's key and known_hosts.

    Namespaces share this machine's file system, so each node gets its own workdir under the
    lab folder and the process runtime can use this checkout's interpreter.
    """
    lab_dir = Path(state.lab_dir)
    nodes = []
    for rank, host in enumerate(state.hosts):
        node: dict[str, object] = {
            "name": host.name,
            "rank": rank,
            "address": host.address,
            "workdir": str(lab_dir / "nodes" / host.name),
        }
        if rank == 0:
            node["head"] = True
        if docker_sockets:
            node["overrides"] = {"docker_daemon": f"unix://{docker_sockets[rank]}"}
        nodes.append(node)
    runtime: dict[str, object] = (
        {"kind": "docker"}
        if docker_sockets
        else {
            "kind": "process",
            "python": python,
        }
    )
    document = {
        "kind": "cluster",
        "name": state.prefix,
        "shape": f"tp{len(state.hosts)}-lab",
        "transport": {
            "kind": "ssh",
            "user": "root",
            "key_file": str(state.client_key),
            "known_hosts": str(state.known_hosts),
            "connect_timeout_s": 5,
            "connect_retries": 1,
            "command_timeout_s": 120,
        },
        "runtime": runtime,
        "engine": {"extends": str(engine_file)},
        "nodes": nodes,
    }
    header = "# Written by `sparkgate lab up`; removed by `sparkgate lab down`.\n"
    return header + yaml.safe_dump(document, sort_keys=False)


# -- running things -----------------------------------------------------------------------------


def _sh(argv: Sequence[str], *, tolerate: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a local admin command; stderr containing `tolerate` (e.g. already gone) is fine.

    LC_ALL=C, because `tolerate` is English text and the operator's locale may translate it.
    """
    env = {**os.environ, "LC_ALL": "C"}
    done = subprocess.run(
        list(argv), capture_output=True, text=True, check=False, timeout=60, env=env
    )
    if done.returncode != 0 and not (tolerate and tolerate in done.stderr):
        raise ClusterError(f"lab: `{' '.join(argv)}` failed: {done.stderr.strip()}")
    return done


def require_root_and_tools(sshd: Path = SSHD) -> None:
    """Lab hosts need root (namespaces, links, sshd) and the tools; say which is missing."""
    if os.geteuid() != 0:
        raise ClusterError(
            "lab hosts need root (network namespaces, veth links and sshd): "
            "run `sudo sparkgate lab up` or use the local cluster"
        )
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if not sshd.is_file():
        missing.append(str(sshd))
    if missing:
        raise ClusterError(
            f"lab hosts need {', '.join(missing)}: install openssh-server and iproute2 "
            "(.ci/run does)"
        )


def _subnet_in_use(subnet: ipaddress.IPv4Network) -> bool:
    routes = json.loads(_sh(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]")
    for route in routes:
        destination = route.get("dst", "")
        if destination in ("", "default") or ":" in destination:
            continue
        with contextlib.suppress(ValueError):
            if ipaddress.IPv4Network(destination, strict=False).overlaps(subnet):
                return True
    return False


class _Recorder:
    """Holds the state and saves it after every change."""

    def __init__(self, state: LabState, path: Path) -> None:
        self.state = state
        self.path = path
        self.save()

    def update(self, **changes: object) -> None:
        self.state = self.state.model_copy(update=changes)
        self.save()

    def host(self, host: LabHost) -> None:
        self.state = self.state.with_host(host)
        self.save()

    def save(self) -> None:
        write_text(self.path, self.state.model_dump_json(indent=2), mode=PRIVATE_MODE)


def read_state(lab_dir: Path) -> LabState | None:
    """The recorded lab in lab_dir, or None when there is none."""
    path = lab_dir / STATE_FILE
    if not path.is_file():
        return None
    try:
        return LabState.model_validate_json(path.read_text())
    except ValueError as error:
        raise ClusterError(
            f"lab state {path} is unreadable ({error}); inspect it by hand"
        ) from error


def _keygen(path: Path, comment: str) -> str:
    _sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return path.with_suffix(".pub").read_text()


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise ClusterError(f"lab: {what} not ready after {timeout:g} s")
        time.sleep(0.05)


def _pid_in(path: Path) -> int | None:
    """The pid written in path, or None while it is missing or still being written."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _accepts(address: str, port: int = 22) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        try:
            probe.connect((address, port))
            return probe.recv(4).startswith(b"SSH-")
        except OSError:
            return False


def _make_network(plan: LabPlan, record: _Recorder) -> None:
    _sh(["ip", "link", "add", plan.bridge, "type", "bridge"])
    record.update(bridge=plan.bridge)
    _sh(["ip", "addr", "add", f"{plan.gateway}/{plan.subnet.prefixlen}", "dev", plan.bridge])
    _sh(["ip", "link", "set", plan.bridge, "up"])
    for index in range(plan.nodes):
        namespace, outer, inner = (
            plan.namespace(index),
            plan.host_link(index),
            plan.peer_link(index),
        )
        _sh(["ip", "netns", "add", namespace])
        record.update(namespaces=(*record.state.namespaces, namespace))
        _sh(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner])
        record.update(links=(*record.state.links, outer))
        _sh(["ip", "link", "set", inner, "netns", namespace])
        _sh(["ip", "link", "set", outer, "master", plan.bridge])
        _sh(["ip", "link", "set", outer, "up"])
        _sh(["ip", "-n", namespace, "link", "set", inner, "name", "eth0"])
        cidr = f"{plan.address(index)}/{plan.subnet.prefixlen}"
        _sh(["ip", "-n", namespace, "addr", "add", cidr, "dev", "eth0"])
        _sh(["ip", "-n", namespace, "link", "set", "eth0", "up"])
        _sh(["ip", "-n", namespace, "link", "set", "lo", "up"])


def _start_sshd(plan: LabPlan, index: int, lab_dir: Path, sshd: Path, record: _Recorder) -> str:
    """Start host `index`'s sshd; return its public host key text."""
    name = plan.namespace(index)
    host_dir = lab_dir / "hosts" / name
    host_dir.mkdir(parents=True, exist_ok=True)
    session_home(name, lab_dir).mkdir(exist_ok=True)
    public_key = _keygen(host_dir / "ssh_host_ed25519_key", f"sparkgate-lab-{name}")
    config = host_dir / "sshd_config"
    address = str(plan.address(index))
    config.write_text(
        sshd_config_text(
            address, host_dir, lab_dir / "authorized_keys", _session_env(plan, name, lab_dir)
        )
    )
    host = LabHost(
        name=name,
        namespace=name,
        address=address,
        host_dir=str(host_dir),
        sshd_config=str(config),
    )
    record.host(host)
    log = host_dir / "sshd.log"
    _sh(["ip", "netns", "exec", name, str(sshd), "-f", str(config), "-E", str(log)])
    pid_file = host_dir / "sshd.pid"
    _wait_for(lambda: _pid_in(pid_file) is not None, 10, f"sshd of {name} (see {log})")
    record.host(host.model_copy(update={"sshd_pid": _pid_in(pid_file)}))
    return public_key


def session_home(name: str, lab_dir: Path) -> Path:
    """Host `name`'s home folder: its SSH sessions' HOME."""
    return lab_dir / "hosts" / name / "home"


def _session_env(plan: LabPlan, name: str, lab_dir: Path) -> dict[str, str]:
    """What an SSH session on host `name` sees: a home of its own, its own dockerd and the
    plan's extra PATH.

    The hosts share this machine's files, root's home included, and bash sources ~/.bashrc for
    every command sshd runs: a controller's shell set-up (a `pyenv init` there took about a
    second per command) is no node's, so each host's sessions get a home of their own, as a real
    node has.
    """
    env: dict[str, str] = {"HOME": str(session_home(name, lab_dir))}
    if plan.docker:
        from flows.cluster.lab.dockerd import daemon_root  # noqa: PLC0415 - docker only when asked

        env["DOCKER_HOST"] = f"unix://{daemon_root(name, lab_dir) / 'api.sock'}"
    if plan.session_path:
        env["PATH"] = ":".join([*plan.session_path, STANDARD_PATH])
    return env


def _start_dockerds(lab_dir: Path, record: _Recorder) -> list[str]:
    """One private dockerd per host inside its namespace; returns their socket paths."""
    from flows.cluster.lab.dockerd import start_dockerd  # noqa: PLC0415 - docker only when asked

    sockets = []
    for host in record.state.hosts:
        handle = start_dockerd(host.name, lab_dir, netns=host.namespace)
        record.host(host.model_copy(update={"dockerd": handle.model_dump(mode="json")}))
        sockets.append(str(handle.socket))
    return sockets


def _stop_dockerds(state: LabState) -> None:
    """Stop each recorded dockerd and delete its folder (images included: it is a test lab)."""
    from flows.cluster.lab.dockerd import (  # noqa: PLC0415
        DockerDaemon,
        remove_daemon_state,
        stop_dockerd,
    )

    for host in state.hosts:
        if host.dockerd is not None:
            handle = DockerDaemon.model_validate(host.dockerd)
            stop_dockerd(handle)
            remove_daemon_state(handle)
        else:  # a daemon that failed to start leaves its folder; remove it unless mounted
            root = Path(state.lab_dir) / "docker" / host.name
            if root.is_dir() and not _has_mounts(root):
                shutil.rmtree(root, ignore_errors=True)


def _has_mounts(root: Path) -> bool:
    prefix = str(root.resolve()) + "/"
    table = Path("/proc/self/mountinfo").read_text()
    return any(line.split()[4].startswith(prefix) for line in table.splitlines())


def lab_up(
    plan: LabPlan, lab_dir: Path, *, engine_file: Path, python: str, sshd: Path = SSHD
) -> LabState:
    """Create the lab described by plan (removing a recorded earlier lab first).

    Writes known_hosts, the client key and `cluster.yaml` into lab_dir; every object is
    recorded in `state.json` as soon as it exists.
    """
    require_root_and_tools(sshd)
    lab_down(lab_dir)
    if _subnet_in_use(plan.subnet):
        raise ClusterError(f"lab: {plan.subnet} is already routed on this machine; pick another")
    lab_dir.mkdir(parents=True, exist_ok=True)
    lab_dir.chmod(0o700)
    Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
    record = _Recorder(
        LabState(
            prefix=plan.prefix, subnet=str(plan.subnet), lab_dir=str(lab_dir), docker=plan.docker
        ),
        lab_dir / STATE_FILE,
    )
    try:
        client_key = lab_dir / "client_key"
        (lab_dir / "authorized_keys").write_text(_keygen(client_key, "sparkgate-lab-client"))
        record.update(client_key=str(client_key))
        _make_network(plan, record)
        entries = [
            (str(plan.address(index)), _start_sshd(plan, index, lab_dir, sshd, record))
            for index in range(plan.nodes)
        ]
        for address, _ in entries:
            _wait_for(functools.partial(_accepts, address), 15, f"sshd at {address}")
        known_hosts = lab_dir / "known_hosts"
        known_hosts.write_text(known_hosts_text(entries))
        record.update(known_hosts=str(known_hosts))
        sockets = _start_dockerds(lab_dir, record) if plan.docker else []
        cluster_file = lab_dir / "cluster.yaml"
        record.update(cluster_file=str(cluster_file))
        cluster_file.write_text(
            cluster_yaml_text(
                record.state, engine_file=engine_file, python=python, docker_sockets=sockets
            )
        )
    except BaseException:
        lab_down(lab_dir)
        raise
    return record.state


# -- teardown -----------------------------------------------------------------------------------


def _is_our_sshd(pid: int, config: str) -> bool:
    """Guard against pid reuse: only a process whose command line names our config is ours."""
    try:
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return config.encode() in command_line  # sshd rewrites its title but keeps the -f path


def _stop_processes(pids: Sequence[int]) -> None:
    """SIGTERM, a short grace, then SIGKILL for whatever is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 5
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)


def _namespace_pids(namespace: str) -> list[int]:
    """Processes living in one of our namespaces (sshd sessions, commands started over ssh)."""
    listed = _sh(["ip", "netns", "pids", namespace], tolerate="No such file").stdout
    return [int(item) for item in listed.split() if item.isdigit()]


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return status.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def lab_down(lab_dir: Path) -> LabState | None:
    """Remove exactly the recorded lab (processes, links, namespaces, bridge, files).

    Idempotent: objects already gone are skipped; with no recorded lab it does nothing.
    """
    state = read_state(lab_dir)
    if state is None:
        return None
    if state.docker:
        _stop_dockerds(state)
    ours = [
        host.sshd_pid
        for host in state.hosts
        if host.sshd_pid is not None and _is_our_sshd(host.sshd_pid, host.sshd_config)
    ]
    for namespace in state.namespaces:
        ours.extend(_namespace_pids(namespace))
    _stop_processes(sorted(set(ours)))
    for link in state.links:
        _sh(["ip", "link", "del", link], tolerate="Cannot find device")
    for namespace in state.namespaces:
        _sh(["ip", "netns", "del", namespace], tolerate="No such file")
    if state.bridge:
        _sh(["ip", "link", "del", state.bridge], tolerate="Cannot find device")
    for host in state.hosts:
        shutil.rmtree(host.host_dir, ignore_errors=True)
    for folder in ("hosts", "docker"):
        with contextlib.suppress(OSError):
            (lab_dir / folder).rmdir()
    for name in ("client_key", "client_key.pub", "authorized_keys", "known_hosts"):
        (lab_dir / name).unlink(missing_ok=True)
    if state.cluster_file:
        Path(state.cluster_file).unlink(missing_ok=True)
    (lab_dir / STATE_FILE).unlink()
    return state
