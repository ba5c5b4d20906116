"""A session-scoped lab of three namespace hosts with sshd, shared by every lab test.

Use the `lab` fixture: `lab.cluster` is the validated cluster model (ssh transport, process
runtime), `lab.transport(i)` a fresh SSH transport to host i, `lab.cut(i)` a context manager that
takes host i's link down and back up. The lab uses its own prefix and subnet (not the ones of
`sparkgate lab up`), a file lock so that two test sessions never build it at once, and the
recorded state of a crashed earlier run is cleaned up first. Teardown always runs.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from flows.cluster.lab.hosts import SSHD, LabPlan, LabState, lab_down, lab_up
from flows.cluster.transport import SshSettings, SshTransport
from flows.spec.cluster import Cluster
from flows.spec.load import load_model

from .paths import ENGINE_FILE, ROOT

LAB_DIR = ROOT / ".sparkgate" / "test-lab"
PLAN = LabPlan(prefix="sg-t", nodes=3, subnet=ipaddress.IPv4Network("198.18.1.0/24"))


def lab_unavailable() -> str | None:
    """Why lab tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "lab tests need root (network namespaces, sshd)"
    missing = [tool for tool in ("ip", "ssh-keygen") if shutil.which(tool) is None]
    if not SSHD.is_file():
        missing.append(str(SSHD))
    if missing:
        return f"lab tests need {', '.join(missing)} (apt-get install openssh-server iproute2)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"network namespaces unavailable: {probe.stderr.strip()}"
    return None


@dataclass
class Lab:
    """A running lab and helpers to reach it."""

    plan: LabPlan
    state: LabState
    cluster: Cluster

    @property
    def client_key(self) -> Path:
        assert self.state.client_key is not None
        return Path(self.state.client_key)

    @property
    def known_hosts(self) -> Path:
        assert self.state.known_hosts is not None
        return Path(self.state.known_hosts)

    def settings(self, index: int, **changes: object) -> SshSettings:
        """SSH settings for host `index` (no ~/.ssh/config), with overrides."""
        base: dict[str, object] = {
            "host": self.state.hosts[index].address,
            "user": "root",
            "key_file": self.client_key,
            "known_hosts": self.known_hosts,
            "ssh_config": None,
            "connect_timeout_s": 3,
            "connect_attempts": 2,
            "retry_backoff_s": 0.2,
        }
        return SshSettings.model_validate(base | changes)

    def transport(self, index: int, **changes: object) -> SshTransport:
        """A new SSH transport (own connection) to host `index`."""
        return SshTransport(self.state.hosts[index].name, self.settings(index, **changes))

    @contextmanager
    def cut(self, index: int) -> Iterator[None]:
        """Take host `index`'s link down for the duration of the block."""
        link = self.plan.host_link(index)
        subprocess.run(["ip", "link", "set", link, "down"], check=True)
        try:
            yield
        finally:
            subprocess.run(["ip", "link", "set", link, "up"], check=True)


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """Three namespace hosts with sshd for the whole session, always torn down."""
    with own_lab(PLAN, LAB_DIR) as running:
        yield running


def docker_lab_missing() -> str | None:
    """Why a docker lab cannot start here (None when it can)."""
    reason = lab_unavailable()
    for tool in ("dockerd", "debootstrap"):
        if reason is None and shutil.which(tool) is None:
            reason = f"needs {tool} (.ci/run installs docker.io and debootstrap)"
    return reason


@contextmanager
def docker_lab(plan: LabPlan, lab_dir: Path) -> Iterator[LabState]:
    """A lab of namespace hosts with a dockerd each, for one module's tests; skipped (failed under
    CI) where it cannot start, torn down at the end."""
    reason = docker_lab_missing()
    if reason:
        pytest.skip(reason)
    try:
        yield lab_up(plan, lab_dir, engine_file=ENGINE_FILE, python=sys.executable)
    finally:
        lab_down(lab_dir)


@contextmanager
def own_lab(plan: LabPlan, lab_dir: Path) -> Iterator[Lab]:
    """A lab of namespace hosts (no docker) with its own plan, always torn down: the shared
    `lab`, and a module's own where a test double's commands go on the sessions' PATH
    (`plan.session_path`), since sshd's environment is fixed when a lab starts. Skipped where
    labs cannot run; a file lock keeps two test sessions from building the same lab at once."""
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    lab_dir.mkdir(parents=True, exist_ok=True)
    with (lab_dir.parent / f"{lab_dir.name}.lock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        try:
            state = lab_up(plan, lab_dir, engine_file=ENGINE_FILE, python=sys.executable)
            assert state.cluster_file is not None
            yield Lab(plan=plan, state=state, cluster=load_model(state.cluster_file, Cluster))
        finally:
            lab_down(lab_dir)
